#include "ckpt/storage/s3/s3_xml.h"

namespace ckpt::s3 {
namespace {

// Position of "<tag>" or "<tag " at or after `from` (skips <tagX>).
size_t FindOpen(std::string_view xml, std::string_view tag, size_t from, size_t* body) {
  while (true) {
    size_t p = xml.find('<', from);
    if (p == std::string_view::npos) return p;
    if (xml.compare(p + 1, tag.size(), tag) == 0) {
      const size_t after = p + 1 + tag.size();
      if (after < xml.size() && (xml[after] == '>' || xml[after] == ' ')) {
        const size_t gt = xml.find('>', after);
        if (gt == std::string_view::npos) return std::string_view::npos;
        *body = gt + 1;
        return p;
      }
    }
    from = p + 1;
  }
}

}  // namespace

std::vector<std::string_view> XmlAll(std::string_view xml, std::string_view tag) {
  std::vector<std::string_view> out;
  const std::string close = "</" + std::string(tag) + ">";
  size_t from = 0, body = 0;
  while (FindOpen(xml, tag, from, &body) != std::string_view::npos) {
    if (xml[body - 2] == '/') {  // <tag/>
      out.emplace_back();
      from = body;
      continue;
    }
    const size_t end = xml.find(close, body);
    if (end == std::string_view::npos) break;
    out.push_back(xml.substr(body, end - body));
    from = end + close.size();
  }
  return out;
}

std::string XmlFirst(std::string_view xml, std::string_view tag, bool* found) {
  auto all = XmlAll(xml, tag);
  if (found) *found = !all.empty();
  return all.empty() ? std::string() : XmlUnescape(all.front());
}

std::string XmlUnescape(std::string_view t) {
  static const std::pair<std::string_view, char> kEnt[] = {
      {"&amp;", '&'}, {"&lt;", '<'}, {"&gt;", '>'}, {"&quot;", '"'}, {"&apos;", '\''}};
  std::string out;
  out.reserve(t.size());
  for (size_t i = 0; i < t.size();) {
    bool matched = false;
    if (t[i] == '&') {
      for (const auto& [ent, ch] : kEnt) {
        if (t.compare(i, ent.size(), ent) == 0) {
          out.push_back(ch);
          i += ent.size();
          matched = true;
          break;
        }
      }
    }
    if (!matched) out.push_back(t[i++]);
  }
  return out;
}

std::string XmlEscape(std::string_view t) {
  std::string out;
  for (char c : t) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out.push_back(c);
    }
  }
  return out;
}

}  // namespace ckpt::s3
