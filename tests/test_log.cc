// Tests of the log (base/log.h): HORA_DEBUG_FILE's pattern, the switch to a file and back, the
// banner before the first INFO line, and lines that stay whole when threads and processes write
// to one file or one pipe at once.
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "base/log.h"

using namespace hora;

namespace {

std::string readFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream s(text);
  for (std::string l; std::getline(s, l);) out.push_back(l);
  return out;
}

struct TempDir {
  std::string path;
  TempDir() {
    char t[] = "/tmp/hora-test-log.XXXXXX";
    REQUIRE(mkdtemp(t) != nullptr);
    path = t;
  }
  ~TempDir() { (void)!system(("rm -rf '" + path + "'").c_str()); }
};

// Writer w's line i: its numbers, then a filler whose length and letter depend on both, so that
// a line cut or spliced with another shows.
std::string payload(int w, int i, size_t maxFill) {
  const size_t n = (static_cast<size_t>(w) * 7919 + static_cast<size_t>(i) * 104729) % maxFill;
  return "w" + std::to_string(w) + " i" + std::to_string(i) + " " + std::string(n, static_cast<char>('a' + (w + i) % 26));
}

void writeLines(int w, int count, size_t maxFill) {
  for (int i = 0; i < count; ++i) HORA_WARN(log::kNet, "%s", payload(w, i, maxFill).c_str());
}

// Writers 0..nproc-1 are child processes, the others threads of this one: each writes count
// lines to the log's current destination. Children are forked before any thread starts, so
// none inherits the log's lock held.
void writeConcurrently(int nproc, int nthread, int count, size_t maxFill) {
  std::vector<pid_t> kids;
  for (int w = 0; w < nproc; ++w) {
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      writeLines(w, count, maxFill);
      _exit(0);
    }
    kids.push_back(pid);
  }
  std::vector<std::thread> threads;
  for (int w = nproc; w < nproc + nthread; ++w) threads.emplace_back(writeLines, w, count, maxFill);
  for (auto& t : threads) t.join();
  for (pid_t k : kids) {
    int status = 0;
    REQUIRE(waitpid(k, &status, 0) == k);
    CHECK((WIFEXITED(status) && WEXITSTATUS(status) == 0));
  }
}

// Every line is one well-formed log line carrying one intact payload, and every writer's lines
// are all there, once each.
void checkWhole(const std::string& text, int writers, int count, size_t maxFill) {
  REQUIRE(!text.empty());
  CHECK(text.back() == '\n');
  static const std::regex kLine(R"(^[^ :]+:\d+:\d+ \[(-|\d+)\] hora WARN NET (w(\d+) i(\d+) [a-z]*)$)");
  std::map<std::pair<int, int>, int> seen;
  size_t bad = 0;
  for (const std::string& l : lines(text)) {
    std::smatch m;
    if (!std::regex_match(l, m, kLine) || m[2].str() != payload(std::stoi(m[3].str()), std::stoi(m[4].str()), maxFill)) {
      if (++bad <= 3) UNSCOPED_INFO("malformed line: " << l.substr(0, 200));
      continue;
    }
    ++seen[{std::stoi(m[3].str()), std::stoi(m[4].str())}];
  }
  CHECK(bad == 0);
  CHECK(seen.size() == static_cast<size_t>(writers * count));
  for (const auto& [key, n] : seen) CHECK(n == 1);
}

}  // namespace

TEST_CASE("log: HORA_DEBUG_FILE patterns", "[log]") {
  CHECK(log::expandFilePattern("/tmp/hora.%h.%p", "node7", 4242) == "/tmp/hora.node7.4242");
  CHECK(log::expandFilePattern("%h%p-%h", "a", 1) == "a1-a");
  CHECK(log::expandFilePattern("plain.log", "a", 1) == "plain.log");
  CHECK(log::expandFilePattern("100%%.%h", "a", 1) == "100%.a");
  CHECK(log::expandFilePattern("%%h", "a", 1) == "%h");
  CHECK(log::expandFilePattern("x%d%", "a", 1) == "x%d%");  // other sequences are kept as they are
  CHECK(log::expandFilePattern("", "a", 1).empty());
}

TEST_CASE("log: to a file and back; a file that cannot be opened changes nothing", "[log]") {
  TempDir dir;
  log::configure(log::Level::Info, log::kAll);
  const std::string pattern = dir.path + "/hora.%h.%p";
  REQUIRE(log::toFile(pattern) == "");
  HORA_INFO(log::kInit, "to the file");
  std::string why = log::toFile(dir.path + "/missing/dir/x.%p");
  CHECK(why.find(dir.path + "/missing/dir/x." + std::to_string(getpid())) != std::string::npos);
  HORA_INFO(log::kInit, "still to the file");
  log::toStderr();
  HORA_TRACE(log::kInit, "not written: TRACE is off");

  const std::string text = readFile(log::expandFilePattern(pattern, log::hostName(), getpid()));
  std::vector<std::string> got = lines(text);
  REQUIRE(got.size() == 2);
  const std::string prefix = std::string(log::hostName()) + ":" + std::to_string(getpid()) + ":";
  CHECK(got[0].rfind(prefix, 0) == 0);
  CHECK(got[0].find("hora INFO INIT to the file") != std::string::npos);
  CHECK(got[1].find("hora INFO INIT still to the file") != std::string::npos);
  log::configure(log::Level::Warn, log::kAll);
}

TEST_CASE("log: the banner comes once, before the first INFO line", "[log]") {
  TempDir dir;
  REQUIRE(log::toFile(dir.path + "/banner.log") == "");
  log::setBanner("Hora 9.9.9 (test)");
  log::configure(log::Level::Warn, log::kAll);
  log::writeBanner();  // INFO is off: nothing yet
  HORA_WARN(log::kNet, "a warning");
  log::configure(log::Level::Info, log::kColl);
  HORA_INFO(log::kNet, "filtered out by the subsystems");
  HORA_INFO(log::kColl, "first info");
  log::writeBanner();
  HORA_INFO(log::kColl, "second info");
  log::toStderr();
  log::configure(log::Level::Warn, log::kAll);

  std::vector<std::string> got = lines(readFile(dir.path + "/banner.log"));
  REQUIRE(got.size() == 4);
  CHECK(got[0].find("hora WARN NET a warning") != std::string::npos);
  CHECK(got[1].find("hora INFO INIT Hora 9.9.9 (test)") != std::string::npos);
  CHECK(got[2].find("hora INFO COLL first info") != std::string::npos);
  CHECK(got[3].find("hora INFO COLL second info") != std::string::npos);
}

TEST_CASE("log: lines stay whole with many threads and processes on one file", "[log]") {
  TempDir dir;
  const std::string path = dir.path + "/many.log";
  REQUIRE(log::toFile(path) == "");
  const int nproc = 3, nthread = 6, count = 300;
  const size_t maxFill = 6000;  // longer than a pipe's atomic write, as a long message may be
  writeConcurrently(nproc, nthread, count, maxFill);
  log::toStderr();
  checkWhole(readFile(path), nproc + nthread, count, maxFill);
}

TEST_CASE("log: lines stay whole with many threads and processes on one pipe", "[log]") {
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  std::string text;
  std::thread reader([&] {
    char buf[65536];
    for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) != 0;)
      if (n > 0) text.append(buf, static_cast<size_t>(n));
  });
  // A second descriptor of the pipe's write end, opened by name as HORA_DEBUG_FILE would be.
  REQUIRE(log::toFile("/dev/fd/" + std::to_string(fds[1])) == "");
  close(fds[1]);
  const int nproc = 3, nthread = 6, count = 300;
  const size_t maxFill = 3000;  // lines up to PIPE_BUF (4096), which a pipe writes whole
  writeConcurrently(nproc, nthread, count, maxFill);
  log::toStderr();  // closes the last write end: the reader sees the end
  reader.join();
  close(fds[0]);
  checkWhole(text, nproc + nthread, count, maxFill);
}
