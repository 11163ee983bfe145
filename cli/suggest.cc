// SuggestFlags: see suggest.h.
#include "cli/suggest.h"

#include <algorithm>
#include <set>
#include <vector>

namespace ckpt::cli {

int EditDistance(const std::string& a, const std::string& b) {
  // Damerau-Levenshtein (optimal string alignment): a swapped pair is one edit.
  std::vector<std::vector<int>> d(a.size() + 1, std::vector<int>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = int(i);
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = int(j);
  for (size_t i = 1; i <= a.size(); ++i)
    for (size_t j = 1; j <= b.size(); ++j) {
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[a.size()][b.size()];
}

namespace {

// The long names ("keep-last") of the options of the subcommand named
// argv[1], or of the app itself when there is none such.
std::set<std::string> LongNames(const CLI::App& app, int argc, char** argv) {
  const CLI::App* cmd = &app;
  if (argc > 1)
    for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; }))
      if (sub->get_name() == argv[1]) cmd = sub;
  std::set<std::string> names;
  for (const CLI::Option* o : cmd->get_options())
    for (const std::string& n : o->get_lnames()) names.insert(n);
  return names;
}

}  // namespace

std::string SuggestFlags(const CLI::App& app, int argc, char** argv) {
  const std::set<std::string> known = LongNames(app, argc, argv);
  std::string out;
  for (int i = 2; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.rfind("--", 0) != 0 || arg.size() < 3) continue;
    std::string name = arg.substr(2, arg.find('=') == std::string::npos ? std::string::npos : arg.find('=') - 2);
    if (known.count(name)) continue;
    const int limit = name.size() <= 4 ? 1 : 2;
    std::string best;
    int best_d = limit + 1;
    for (const std::string& k : known) {
      const int d = EditDistance(name, k);
      if (d < best_d) best_d = d, best = k;
    }
    if (!best.empty()) out += "ckpt: unknown flag --" + name + ": did you mean --" + best + "?\n";
  }
  return out;
}

}  // namespace ckpt::cli
