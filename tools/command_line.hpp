// The command-line parser of braid's tools (braid-run, braid-perf,
// braid-overlap), so they all accept the same forms:
//
//   -n 4   -n4            a short option with its value, separate or attached
//   --ranks 4 --ranks=4   a long option with its value, separate or after '='
//   --json                a flag (a value, --json=1, is refused)
//   --check --check=0     a long option whose value is optional
//   --                    ends the options; what follows is positional
//
// Each option names its handler, which parses and stores the value (and
// throws UsageError on a bad one). Positional arguments either interleave
// with the options (braid-perf's COLLECTIVE) or end them (braid-run's
// program, whose own arguments must reach it untouched).
#pragma once

#include <functional>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace braid {

/// A command line that cannot be run; the tools print it with their usage
/// and exit with status 2.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class CommandLine {
 public:
  using ValueHandler = std::function<void(std::string_view name, std::string_view value)>;
  using FlagHandler = std::function<void()>;

  /// An option that takes a value, under each of `names` ("-n", "--ranks").
  CommandLine& option(std::initializer_list<std::string_view> names, ValueHandler on_value);
  /// A flag: no value.
  CommandLine& flag(std::initializer_list<std::string_view> names, FlagHandler on_set);
  /// A long option whose value is optional and can only be attached
  /// ("--check=0"); alone it gets `implicit`.
  CommandLine& optional_value(std::initializer_list<std::string_view> names, std::string implicit, ValueHandler on_value);
  /// --version: prints "PROGRAM VERSION" (braid's version, meson.build's)
  /// on stdout and exits with status 0 while parsing, as GNU tools do.
  CommandLine& version(std::string_view program);

  enum class Positionals {
    interleaved,  // every positional goes to on_positional; options may follow
    end_options,  // the first positional ends parsing; it and the rest are returned
  };

  /// Parses args (argv without the program name). With interleaved
  /// positionals it returns nothing; with end_options, the program and its
  /// arguments (empty if none). Throws UsageError.
  std::vector<std::string> parse(const std::vector<std::string_view>& args, Positionals mode,
                                 const std::function<void(std::string_view)>& on_positional = {}) const;
  std::vector<std::string> parse(int argc, char** argv, Positionals mode,
                                 const std::function<void(std::string_view)>& on_positional = {}) const;

 private:
  enum class Arity { value, none, optional };
  struct Spec {
    std::vector<std::string> names;
    Arity arity;
    std::string implicit;
    ValueHandler on_value;
    FlagHandler on_set;
  };
  const Spec* find(std::string_view name) const;

  std::vector<Spec> specs_;
};

}  // namespace braid
