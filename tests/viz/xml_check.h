// XML well-formedness for the SVG and HTML the viz tests check (shared by their files).
#pragma once

#include <string>
#include <vector>

namespace attend::test {

// XML well-formedness: every tag closed in order, attributes quoted, only the five
// predefined or numeric entities. Returns "" or what is wrong.
inline std::string xml_problem(const std::string& x) {
  std::vector<std::string> open;
  size_t i = 0;
  while (i < x.size()) {
    if (x[i] == '&') {
      size_t e = x.find(';', i);
      if (e == std::string::npos) return "unterminated entity at " + std::to_string(i);
      const std::string ent = x.substr(i + 1, e - i - 1);
      if (ent != "amp" && ent != "lt" && ent != "gt" && ent != "quot" && ent != "apos" &&
          (ent.empty() || ent[0] != '#'))
        return "unknown entity &" + ent + ";";
      i = e + 1;
      continue;
    }
    if (x[i] != '<') {
      ++i;
      continue;
    }
    size_t e = i + 1;
    char quote = 0;
    for (; e < x.size(); ++e) {
      if (quote) {
        if (x[e] == quote) quote = 0;
        if (x[e] == '<') return "'<' inside an attribute at " + std::to_string(e);
      } else if (x[e] == '"' || x[e] == '\'') {
        quote = x[e];
      } else if (x[e] == '>') {
        break;
      }
    }
    if (e >= x.size()) return "unterminated tag at " + std::to_string(i);
    std::string tag = x.substr(i + 1, e - i - 1);
    i = e + 1;
    if (tag.empty() || tag[0] == '?' || tag[0] == '!') continue;
    if (tag[0] == '/') {
      const std::string name = tag.substr(1);
      if (open.empty() || open.back() != name)
        return "</" + name + "> closes <" + (open.empty() ? "" : open.back()) + ">";
      open.pop_back();
    } else if (tag.back() != '/') {
      open.push_back(tag.substr(0, tag.find_first_of(" \t\n")));
    }
  }
  return open.empty() ? "" : "<" + open.back() + "> never closed";
}

}  // namespace attend::test
