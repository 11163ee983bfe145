// Flag typo suggestions: `ckpt save --keep-lst 3` fails to parse (CLI11 says
// the argument was not expected); the caller then prints "did you mean
// --keep-last?" for each unknown --flag close to one the command has.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

namespace ckpt::cli {

// Edit distance (insert, delete, substitute, swap of neighbours) of a and b.
int EditDistance(const std::string& a, const std::string& b);

// "did you mean --x?" lines (each ending in '\n') for the --flags of argv
// that the subcommand argv[1] does not know and that lie within an edit
// distance of 2 (1 for names up to 4 letters) of one it does; "" if none.
std::string SuggestFlags(const CLI::App& app, int argc, char** argv);

}  // namespace ckpt::cli
