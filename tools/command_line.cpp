#include "command_line.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <optional>

namespace braid {

CommandLine& CommandLine::option(std::initializer_list<std::string_view> names, ValueHandler on_value) {
  specs_.push_back({{names.begin(), names.end()}, Arity::value, {}, std::move(on_value), {}});
  return *this;
}

CommandLine& CommandLine::flag(std::initializer_list<std::string_view> names, FlagHandler on_set) {
  specs_.push_back({{names.begin(), names.end()}, Arity::none, {}, {}, std::move(on_set)});
  return *this;
}

CommandLine& CommandLine::optional_value(std::initializer_list<std::string_view> names, std::string implicit,
                                         ValueHandler on_value) {
  specs_.push_back({{names.begin(), names.end()}, Arity::optional, std::move(implicit), std::move(on_value), {}});
  return *this;
}

CommandLine& CommandLine::version(std::string_view program) {
  return flag({"--version"}, [name = std::string(program)] {
    std::printf("%s %s\n", name.c_str(), BRAID_PROJECT_VERSION);
    std::fflush(stdout);
    std::exit(0);
  });
}

const CommandLine::Spec* CommandLine::find(std::string_view name) const {
  for (const Spec& s : specs_)
    if (std::find(s.names.begin(), s.names.end(), name) != s.names.end()) return &s;
  return nullptr;
}

std::vector<std::string> CommandLine::parse(const std::vector<std::string_view>& args, Positionals mode,
                                            const std::function<void(std::string_view)>& on_positional) const {
  std::size_t i = 0;
  auto positional = [&](std::string_view arg) {
    if (!on_positional) throw UsageError("unexpected argument '" + std::string(arg) + "'");
    on_positional(arg);
  };
  while (i < args.size()) {
    const std::string_view arg = args[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if (arg.size() < 2 || arg[0] != '-') {
      if (mode == Positionals::end_options) break;
      positional(arg);
      ++i;
      continue;
    }
    // "--name=value" and "-nVALUE" carry their value in the same argument.
    std::string_view name = arg;
    std::optional<std::string_view> attached;
    if (arg.starts_with("--")) {
      if (auto eq = arg.find('='); eq != std::string_view::npos) {
        name = arg.substr(0, eq);
        attached = arg.substr(eq + 1);
      }
    } else if (arg.size() > 2) {
      name = arg.substr(0, 2);
      attached = arg.substr(2);
    }
    ++i;
    const Spec* spec = find(name);
    if (spec == nullptr) throw UsageError("unknown option '" + std::string(arg) + "'");
    switch (spec->arity) {
      case Arity::none:
        if (attached) throw UsageError(std::string(name) + " takes no value");
        spec->on_set();
        break;
      case Arity::optional: spec->on_value(name, attached ? *attached : std::string_view(spec->implicit)); break;
      case Arity::value:
        if (attached) {
          spec->on_value(name, *attached);
        } else {
          if (i >= args.size()) throw UsageError(std::string(name) + " needs a value");
          spec->on_value(name, args[i++]);
        }
        break;
    }
  }
  std::vector<std::string> rest;
  for (; i < args.size(); ++i) {
    if (mode == Positionals::end_options) rest.emplace_back(args[i]);
    else positional(args[i]);
  }
  return rest;
}

std::vector<std::string> CommandLine::parse(int argc, char** argv, Positionals mode,
                                            const std::function<void(std::string_view)>& on_positional) const {
  return parse(std::vector<std::string_view>(argv + 1, argv + argc), mode, on_positional);
}

}  // namespace braid
