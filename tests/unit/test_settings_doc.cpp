// The README's settings table must be exactly the settings table in code
// (src/core/settings.cpp), which is also what braid-run --env-help prints.
#include <catch2/catch.hpp>

#include <fstream>
#include <sstream>
#include <string>

#include "core/settings.hpp"

TEST_CASE("the README documents every setting exactly as the code defines it") {
  std::ifstream readme(BRAID_SOURCE_ROOT "/README.md");
  REQUIRE(readme.good());
  std::stringstream text;
  text << readme.rdbuf();
  const std::string all = text.str();
  const std::string begin = "<!-- settings-table:begin -->\n", end = "<!-- settings-table:end -->";
  auto from = all.find(begin), to = all.find(end);
  REQUIRE(from != std::string::npos);
  REQUIRE(to != std::string::npos);
  std::string documented = all.substr(from + begin.size(), to - from - begin.size());

  std::string expected = "| Variable | Default | Meaning |\n| --- | --- | --- |\n";
  for (const auto& s : braid::setting_table())
    expected += "| `" + std::string(s.name) + "` | " + std::string(s.default_value) + " | " + std::string(s.meaning) + " |\n";
  CHECK(documented == expected);
}
