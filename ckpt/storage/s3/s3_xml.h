// The few pieces of S3's XML answers ckpt reads (ListObjectsV2,
// ListMultipartUploads, InitiateMultipartUpload, Error). Not a general XML
// parser: S3 answers are flat, namespaced only on the root, without CDATA or
// attributes on the elements read here. Pure functions.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace ckpt::s3 {

// The text inside the first <tag>...</tag> of `xml` (entities decoded), or ""
// when absent. `found`, when given, says whether it was present.
std::string XmlFirst(std::string_view xml, std::string_view tag, bool* found = nullptr);
// The raw inner text of every <tag>...</tag> in order (not decoded: pass
// each to XmlFirst for its children).
std::vector<std::string_view> XmlAll(std::string_view xml, std::string_view tag);
// &amp; &lt; &gt; &quot; &apos; decoded; escaped for the request bodies.
std::string XmlUnescape(std::string_view text);
std::string XmlEscape(std::string_view text);

}  // namespace ckpt::s3
