// hora-config-doc: prints the configuration reference (docs/configuration.md) from the table of
// variables (kVariables, src/comm/config_table.cc). Not installed.
//   hora-config-doc                 the page, on stdout
//   hora-config-doc --output FILE   writes it to FILE (ninja docs-configuration)
//   hora-config-doc --check FILE    exit 1, saying how to regenerate it, where FILE differs
#include <cctype>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "comm/config.h"

namespace {

using hora::Topic;
using hora::Variable;

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

// Text for a table cell: '|' escaped.
std::string cell(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '|') out += '\\';
    out += c;
  }
  return out;
}

std::string code(const std::string& s) { return "`" + s + "`"; }

std::string codes(const std::string& commaList, const char* sep) {
  std::string out;
  for (const std::string& n : split(commaList)) out += (out.empty() ? "" : sep) + code(n);
  return out;
}

// A default: "(text)" is a description, anything else a literal value; "" is "unset".
std::string defaultCell(const std::string& d) {
  if (d.empty()) return "unset";
  if (d.front() == '(' && d.back() == ')') return cell(d.substr(1, d.size() - 2));
  return code(d);
}

// The anchor a Markdown renderer gives a heading: lower case, blanks as '-', other punctuation dropped.
std::string anchor(const std::string& title) {
  std::string out;
  for (char c : title) {
    if (isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_') out += static_cast<char>(tolower(c));
    else if (c == ' ') out += '-';
  }
  return out;
}

std::string link(const std::string& title) { return "[" + title + "](#" + anchor(title) + ")"; }

std::string page() {
  std::string o;
  o += "# Configuration\n\n";
  o += "<!-- Generated from the table of variables in src/comm/config_table.cc by tools/hora_config_doc.cc;\n"
       "     do not edit. Regenerate with: ninja -C <build> docs-configuration -->\n\n";
  o += "Hora is configured by environment variables. The library reads its settings in one module\n"
       "(`src/comm/config.cc`), and the rank, size and rendezvous in `src/comm/launch.cc`; hora-run, the\n"
       "Python package and the perf scripts read their own, listed here too. An invalid value makes the\n"
       "call that reads it fail with a message that names the variable, the value and what was\n"
       "expected (`HORA_TIMEOUT_MS='abc' is invalid: expected a positive number of milliseconds`). An\n"
       "unknown `HORA_*` variable is reported with a suggestion (`HORA_TIMOUT_MS (did you mean\n"
       "HORA_TIMEOUT_MS?) is not a Hora variable; it is ignored`). Settings that must agree on every rank\n"
       "say so; a rank that differs fails every rank's init with the same text\n"
       "([Troubleshooting](troubleshooting.md)).\n\n";
  o += "Hora also reads the `NCCL_*` variables that set one of its knobs, whichever ABI the program\n"
       "uses; the `HORA_*` variable wins where both are set ([NCCL's variables](#nccls-variables)).\n\n";
  const Topic order[] = {Topic::Core, Topic::Transports, Topic::Ib, Topic::Cuda, Topic::Launch,
                         Topic::HoraRun, Topic::Python, Topic::TorchBackend, Topic::Perf};
  o += "## Contents\n\n";
  for (Topic t : order) o += "- " + link(hora::topicTitle(t)) + "\n";
  o += "- " + link("NCCL's variables") + "\n- " + link(hora::topicTitle(Topic::NcclIgnored)) + "\n\n";
  for (Topic t : order) {
    o += std::string("## ") + hora::topicTitle(t) + "\n\n";
    o += "| variable | type | default | values | meaning |\n| --- | --- | --- | --- | --- |\n";
    for (const Variable& v : hora::variables()) {
      if (!v.name || v.topic != t) continue;
      std::string meaning = cell(v.meaning);
      if (*v.nccl) meaning += " (also read from " + codes(v.nccl, ", ") + ")";
      o += "| " + code(v.name) + " | " + cell(v.type) + " | " + defaultCell(v.defaultText) + " | " + cell(v.values) +
           " | " + meaning + " |\n";
    }
    o += "\n";
  }
  o += "## NCCL's variables\n\n";
  o += "Where its `HORA_*` twin is not set, each of these is read as that twin. At `HORA_DEBUG=INFO`\n"
       "(subsystem `ENV`) each one used says what it was read as, or that its `HORA_*` twin overrides\n"
       "it, and one line lists the `NCCL_*` variables set that Hora does not read. An `NCCL_*` value\n"
       "Hora cannot take is never an error: a warning names it and says it is ignored.\n\n";
  o += "| NCCL variable | read as | how |\n| --- | --- | --- |\n";
  for (const Variable& v : hora::variables())
    if (v.name && *v.nccl)
      o += "| " + codes(v.nccl, ", ") + " | " + code(v.name) + " | " + cell(v.ncclNote) + " |\n";
  o += "\n## " + std::string(hora::topicTitle(Topic::NcclIgnored)) + "\n\n";
  o += "These are recognized and ignored (any other `NCCL_*` variable is ignored too).\n\n";
  o += "| NCCL variables | why |\n| --- | --- |\n";
  for (const Variable& v : hora::variables())
    if (!v.name) o += "| " + codes(v.nccl, ", ") + " | " + cell(v.ncclNote) + " |\n";
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string text = page();
  if (argc == 1) {
    fputs(text.c_str(), stdout);
    return 0;
  }
  if (argc == 3 && strcmp(argv[1], "--output") == 0) {
    std::ofstream out(argv[2], std::ios::binary | std::ios::trunc);
    out << text;
    if (!out.flush()) {
      fprintf(stderr, "hora-config-doc: cannot write %s\n", argv[2]);
      return 1;
    }
    return 0;
  }
  if (argc == 3 && strcmp(argv[1], "--check") == 0) {
    std::ifstream in(argv[2], std::ios::binary);
    std::stringstream got;
    got << in.rdbuf();
    if (in && got.str() == text) return 0;
    fprintf(stderr,
            "%s differs from the table of variables in src/comm/config_table.cc (or cannot be read).\n"
            "Regenerate it with: ninja -C <build> docs-configuration (and commit it).\n",
            argv[2]);
    return 1;
  }
  fprintf(stderr, "usage: hora-config-doc [--output FILE | --check FILE]\n");
  return 2;
}
