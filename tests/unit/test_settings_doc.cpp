// docs/settings.md's table must be exactly the settings table in code
// (src/core/settings.cpp), which is also what braid-run --env-help prints;
// `ninja -C build settings-doc` writes it (scripts/settings-doc.py).
#include <catch2/catch.hpp>

#include <fstream>
#include <sstream>
#include <string>

#include "core/settings.hpp"

TEST_CASE("docs/settings.md documents every setting exactly as the code defines it") {
  std::ifstream doc(BRAID_SOURCE_ROOT "/docs/settings.md");
  REQUIRE(doc.good());
  std::stringstream text;
  text << doc.rdbuf();
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
