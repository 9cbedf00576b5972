// Tests of tcp::Connection over real AF_UNIX socket pairs: messages of many sizes in both
// directions over one or several sockets, and every way a peer can misbehave (truncated,
// malformed or garbage headers, aborts, EOF), each of which must surface as hora::Error from
// progress() without touching receive buffers beyond what was legitimately received. The
// frame header itself is tested in test_frame.cc.
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "base/error.h"
#include "transports/tcp/connection.h"
#include "transports/frame.h"
#include "unit_frame.h"
#include "unit_net.h"

using namespace hora;
using namespace unit;  // with the frame names of unit_frame.h
using hora::frame::kMaxAbortText;
using hora::transport::Cookie;

namespace {

// Two connections, each holding one end of nsocks socket pairs.
struct ConnPair {
  std::unique_ptr<tcp::Connection> a, b;
};

ConnPair makePair(int nsocks) {
  std::vector<Fd> as, bs;
  for (int i = 0; i < nsocks; ++i) {
    auto p = unit::socketPair();
    as.push_back(std::move(p.first));
    bs.push_back(std::move(p.second));
  }
  ConnPair cp;
  cp.a = std::make_unique<tcp::Connection>(std::move(as), "rank 1 (peer-b)");
  cp.b = std::make_unique<tcp::Connection>(std::move(bs), "rank 0 (peer-a)");
  return cp;
}

// Drives connections until a condition holds, blocking in poll() on their sockets when
// nothing moves. Completed cookies accumulate per connection. Throws what progress() throws,
// or std::runtime_error when the guard expires (a hang turned into a failure).
struct Pump {
  explicit Pump(std::vector<tcp::Connection*> c) : conns(std::move(c)) {}
  std::vector<tcp::Connection*> conns;
  std::map<tcp::Connection*, std::vector<Cookie>> done;

  bool stepOnce() {
    bool moved = false;
    for (tcp::Connection* c : conns) {
      std::vector<Cookie> got;
      bool m = c->progress(got);
      moved |= m;
      for (Cookie k : got) done[c].push_back(k);
      if (!got.empty()) moved = true;
    }
    return moved;
  }
  template <class Pred>
  void until(Pred pred) {
    unit::Guard g;
    while (!pred()) {
      if (stepOnce()) continue;
      if (pred()) return;
      if (g.expired()) throw std::runtime_error("test guard expired: the connections hang");
      std::vector<pollfd> fds;
      for (tcp::Connection* c : conns) c->addPollFds(fds);
      ::poll(fds.data(), fds.size(), 100);
    }
  }
  bool has(tcp::Connection* c, Cookie k) const {
    auto it = done.find(c);
    return it != done.end() && std::count(it->second.begin(), it->second.end(), k) > 0;
  }
};

struct Caught {
  bool thrown = false;
  bool hora = false;
  bool peerFailure = false;
  Errc code = Errc::Success;
  std::string what;
};

template <class F>
Caught capture(F f) {
  Caught c;
  try {
    f();
  } catch (const PeerFailure& e) {
    c.thrown = c.hora = c.peerFailure = true;
    c.code = e.code();
    c.what = e.what();
  } catch (const Error& e) {
    c.thrown = c.hora = true;
    c.code = e.code();
    c.what = e.what();
  } catch (const std::exception& e) {
    c.thrown = true;
    c.what = e.what();
  }
  return c;
}

// A receiving connection (one socket) whose peer is a raw socket the test writes by hand.
struct RawPeer {
  Fd raw;
  std::unique_ptr<tcp::Connection> conn;
  explicit RawPeer(int nsocks = 1) {
    std::vector<Fd> mine;
    for (int i = 0; i < nsocks; ++i) {
      auto p = unit::socketPair();
      mine.push_back(std::move(p.first));
      raws.push_back(std::move(p.second));
    }
    raw = Fd(raws[0].release());
    conn = std::make_unique<tcp::Connection>(std::move(mine), "rank 7 (raw peer)");
  }
  std::vector<Fd> raws;  // raws[0] moved into `raw`
  int fd(int i) const { return i == 0 ? raw.get() : raws[static_cast<size_t>(i)].get(); }
  void writeHeader(int sock, FrameType type, uint64_t seq, uint64_t length, uint64_t tag) {
    Encoded e = encode(type, seq, length, tag);
    unit::rawWrite(fd(sock), e.b, sizeof e.b);
  }
};

constexpr uint8_t kCanary = 0xAB;

bool allCanary(const std::vector<uint8_t>& v, size_t from = 0) {
  for (size_t i = from; i < v.size(); ++i)
    if (v[i] != kCanary) return false;
  return true;
}

}  // namespace

// =============================================================================================
// tcp::Connection
// =============================================================================================

TEST_CASE("tcp connection: messages of many sizes in both directions", "[tcp]") {
  const int nsocks = GENERATE(1, 3);
  INFO("nsocks " << nsocks);
  ConnPair cp = makePair(nsocks);
  tcp::Connection* A = cp.a.get();
  tcp::Connection* B = cp.b.get();
  const std::vector<size_t> sizes = {0, 1, 31, 32, 33, 4096, (size_t(1) << 20) + 7, 5, 0, 64};
  const size_t n = sizes.size();
  constexpr size_t kTail = 64;

  std::vector<std::vector<uint8_t>> aOut(n), bOut(n), aIn(n), bIn(n);
  for (size_t i = 0; i < n; ++i) {
    aOut[i] = unit::pattern(sizes[i], static_cast<uint32_t>(i));
    bOut[i] = unit::pattern(sizes[i], static_cast<uint32_t>(1000 + i));
    aIn[i].assign(sizes[i] + kTail, kCanary);
    bIn[i].assign(sizes[i] + kTail, kCanary);
  }
  // Cookies: A's sends 0.., A's recvs 100..; B's recvs 0.., B's sends 100.. (each connection
  // reports only its own).
  auto tagAB = [](size_t i) { return 0x1000 + i; };
  auto tagBA = [](size_t i) { return 0x2000 + i * 7; };
  Pump pump({A, B});

  // A: all its sends and receives at once, interleaved.
  for (size_t i = 0; i < n; ++i) {
    A->postSend(aOut[i].data(), sizes[i], tagAB(i), static_cast<Cookie>(i));
    A->postRecv(aIn[i].data(), sizes[i], tagBA(i), static_cast<Cookie>(100 + i));
  }
  CHECK(A->busy());
  // B: half of its receives and all of its sends; run until B's third receive is in, then
  // post the rest (later receives meet frames that already wait in the socket).
  const size_t half = n / 2;
  for (size_t i = 0; i < half; ++i) B->postRecv(bIn[i].data(), sizes[i], tagAB(i), static_cast<Cookie>(i));
  for (size_t i = 0; i < n; ++i) B->postSend(bOut[i].data(), sizes[i], tagBA(i), static_cast<Cookie>(100 + i));
  pump.until([&] { return pump.has(B, 2); });
  for (size_t i = half; i < n; ++i) B->postRecv(bIn[i].data(), sizes[i], tagAB(i), static_cast<Cookie>(i));

  pump.until([&] { return !A->busy() && !B->busy(); });

  for (tcp::Connection* c : {A, B}) {
    std::vector<Cookie> got = pump.done[c];
    std::sort(got.begin(), got.end());
    std::vector<Cookie> want;
    for (size_t i = 0; i < n; ++i) want.push_back(static_cast<Cookie>(i));
    for (size_t i = 0; i < n; ++i) want.push_back(static_cast<Cookie>(100 + i));
    CHECK(got == want);  // each exactly once
  }
  for (size_t i = 0; i < n; ++i) {
    INFO("message " << i << " of " << sizes[i] << " bytes");
    CHECK(std::equal(aOut[i].begin(), aOut[i].end(), bIn[i].begin()));
    CHECK(std::equal(bOut[i].begin(), bOut[i].end(), aIn[i].begin()));
    CHECK(allCanary(aIn[i], sizes[i]));
    CHECK(allCanary(bIn[i], sizes[i]));
  }
  // Nothing left over: a further progress moves nothing.
  std::vector<Cookie> extra;
  A->progress(extra);
  B->progress(extra);
  CHECK(extra.empty());
}

TEST_CASE("tcp connection: hundreds of queued small messages", "[tcp]") {
  const int nsocks = GENERATE(1, 2, 3);
  INFO("nsocks " << nsocks);
  ConnPair cp = makePair(nsocks);
  const size_t n = 300;
  std::vector<std::vector<uint8_t>> out(n), in(n);
  for (size_t i = 0; i < n; ++i) {
    out[i] = unit::pattern(i % 50, static_cast<uint32_t>(7 * i + 3));
    in[i].assign(i % 50 + 8, kCanary);
  }
  for (size_t i = 0; i < n; ++i) cp.a->postSend(out[i].data(), out[i].size(), 77, static_cast<Cookie>(i));
  for (size_t i = 0; i < n; ++i) cp.b->postRecv(in[i].data(), out[i].size(), 77, static_cast<Cookie>(i));
  Pump pump({cp.a.get(), cp.b.get()});
  pump.until([&] { return !cp.a->busy() && !cp.b->busy(); });
  CHECK(pump.done[cp.a.get()].size() == n);
  CHECK(pump.done[cp.b.get()].size() == n);
  std::set<Cookie> distinct(pump.done[cp.b.get()].begin(), pump.done[cp.b.get()].end());
  CHECK(distinct.size() == n);
  for (size_t i = 0; i < n; ++i) {
    INFO("message " << i);
    CHECK(std::equal(out[i].begin(), out[i].end(), in[i].begin()));
    CHECK(allCanary(in[i], out[i].size()));
  }
}

TEST_CASE("tcp connection: message k travels on socket k % nsocks", "[tcp]") {
  const int nsocks = 3;
  RawPeer rp(nsocks);
  const size_t n = 8;
  const uint64_t tag = 0x77;
  std::vector<std::vector<uint8_t>> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = unit::pattern(10 + 100 * i, static_cast<uint32_t>(i));
  for (size_t i = 0; i < n; ++i) rp.conn->postSend(out[i].data(), out[i].size(), tag, static_cast<Cookie>(i));
  Pump pump({rp.conn.get()});
  pump.until([&] { return !rp.conn->busy(); });  // small enough to fit the socket buffers
  CHECK(pump.done[rp.conn.get()].size() == n);
  for (int s = 0; s < nsocks; ++s) {
    for (size_t k = static_cast<size_t>(s); k < n; k += nsocks) {
      uint8_t hdr[kFrameHeaderBytes];
      unit::rawRead(rp.fd(s), hdr, sizeof hdr);
      FrameHeader h;
      std::string why;
      INFO("socket " << s << " message " << k);
      REQUIRE(decode(hdr, Expectation{k, out[k].size(), tag}, &h, &why) == FrameCheck::Ok);
      std::vector<uint8_t> payload(out[k].size());
      unit::rawRead(rp.fd(s), payload.data(), payload.size());
      CHECK(payload == out[k]);
    }
    uint8_t extra;
    CHECK(::recv(rp.fd(s), &extra, 1, MSG_DONTWAIT) < 0);  // nothing more on this socket
  }

  // The other direction: frames written socket by socket, last socket first, are received in
  // message order.
  std::vector<std::vector<uint8_t>> in(n);
  for (size_t i = 0; i < n; ++i) in[i].assign(out[i].size() + 16, kCanary);
  for (size_t i = 0; i < n; ++i)
    rp.conn->postRecv(in[i].data(), out[i].size(), tag, static_cast<Cookie>(100 + i));
  for (int s = nsocks - 1; s >= 0; --s)
    for (size_t k = static_cast<size_t>(s); k < n; k += nsocks) {
      rp.writeHeader(s, FrameType::Data, k, out[k].size(), tag);
      unit::rawWrite(rp.fd(s), out[k].data(), out[k].size());
    }
  pump.until([&] { return !rp.conn->busy(); });
  for (size_t i = 0; i < n; ++i) {
    CHECK(std::equal(out[i].begin(), out[i].end(), in[i].begin()));
    CHECK(allCanary(in[i], out[i].size()));
  }
}

TEST_CASE("tcp connection: a truncated header then close is a Remote error", "[tcp]") {
  RawPeer rp;
  std::vector<uint8_t> buf(100, kCanary);
  rp.conn->postRecv(buf.data(), 64, 5, 1);
  Encoded e = encode(FrameType::Data, 0, 64, 5);
  unit::rawWrite(rp.fd(0), e.b, 10);
  rp.raw.reset();
  Pump pump({rp.conn.get()});
  Caught c = capture([&] { pump.until([] { return false; }); });
  REQUIRE(c.hora);
  CHECK(c.code == Errc::Remote);
  CHECK(!c.peerFailure);
  CHECK(contains(c.what, "closed"));
  CHECK(contains(c.what, "rank 7"));
  CHECK(allCanary(buf));
}

TEST_CASE("tcp connection: a bad header is a Remote error and writes nothing", "[tcp]") {
  RawPeer rp;
  const uint64_t tag = 0x1234;
  // One good message first, then a bad header for the second.
  std::vector<uint8_t> first = unit::pattern(40, 1);
  std::vector<uint8_t> buf0(48, kCanary), buf1(100, kCanary);
  rp.conn->postRecv(buf0.data(), 40, tag, 1);
  rp.conn->postRecv(buf1.data(), 64, tag, 2);
  rp.writeHeader(0, FrameType::Data, 0, 40, tag);
  unit::rawWrite(rp.fd(0), first.data(), first.size());

  std::string expectText;
  Errc expectCode = Errc::Remote;  // a broken stream; another call's frame is a mismatch
  SECTION("wrong length") {
    rp.writeHeader(0, FrameType::Data, 1, 65, tag);
    expectText = "65";
    expectCode = Errc::InvalidUsage;
  }
  SECTION("wrong tag") {
    rp.writeHeader(0, FrameType::Data, 1, 64, tag + 1);
    expectText = "mismatched";
    expectCode = Errc::InvalidUsage;
  }
  SECTION("wrong magic") {
    Encoded e = encode(FrameType::Data, 1, 64, tag);
    e.b[3] = 'X';
    unit::rawWrite(rp.fd(0), e.b, sizeof e.b);
    expectText = "magic";
  }
  SECTION("wrong sequence") {
    rp.writeHeader(0, FrameType::Data, 2, 64, tag);
    expectText = "sequence";
  }
  SECTION("unknown type") {
    Encoded e = encode(FrameType::Data, 1, 64, tag);
    e.b[4] = 9;
    unit::rawWrite(rp.fd(0), e.b, sizeof e.b);
    expectText = "type";
  }
  SECTION("an oversized abort frame") {
    rp.writeHeader(0, FrameType::Abort, 0, kMaxAbortText + 1, 0);
    expectText = "abort";
  }
  // A payload follows the bad header: it must not be read into the buffer.
  std::vector<uint8_t> junk(65, 0x5A);
  unit::rawWrite(rp.fd(0), junk.data(), junk.size());

  Pump pump({rp.conn.get()});
  Caught c = capture([&] { pump.until([] { return false; }); });
  INFO(c.what);
  REQUIRE(c.hora);
  CHECK(c.code == expectCode);
  CHECK(!c.peerFailure);
  CHECK(contains(c.what, expectText));
  CHECK(contains(c.what, "rank 7"));
  CHECK(std::equal(first.begin(), first.end(), buf0.begin()));
  CHECK(allCanary(buf0, 40));
  CHECK(allCanary(buf1));
}

TEST_CASE("tcp connection: garbage bytes are a Remote error", "[tcp]") {
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    RawPeer rp;
    std::vector<uint8_t> buf(300, kCanary);
    rp.conn->postRecv(buf.data(), 256, 99, 1);
    std::vector<uint8_t> garbage = unit::pattern(300, seed);
    unit::rawWrite(rp.fd(0), garbage.data(), garbage.size());
    Pump pump({rp.conn.get()});
    Caught c = capture([&] { pump.until([] { return false; }); });
    INFO("seed " << seed << ": " << c.what);
    REQUIRE(c.hora);
    CHECK(c.code == Errc::Remote);
    CHECK(allCanary(buf));
  }
}

TEST_CASE("tcp connection: shutdown sends its reason to the peer", "[tcp]") {
  const int nsocks = GENERATE(1, 3);
  INFO("nsocks " << nsocks);
  ConnPair cp = makePair(nsocks);
  Pump pump({cp.b.get()});
  const std::string reason = "rank 0 failed: the disk is on fire";

  SECTION("with nothing exchanged") {
    std::vector<uint8_t> buf(32, kCanary);
    cp.b->postRecv(buf.data(), 16, 3, 1);
    cp.a->shutdown(reason, Errc::Timeout);
    Caught c = capture([&] { pump.until([] { return false; }); });
    REQUIRE(c.peerFailure);
    CHECK(c.code == Errc::Timeout);  // the code of the cause travels with its text
    CHECK(contains(c.what, reason));
    CHECK(allCanary(buf));
  }
  SECTION("after a message, on the next socket") {
    std::vector<uint8_t> msg = unit::pattern(16, 5);
    std::vector<uint8_t> buf0(32, kCanary), buf1(32, kCanary);
    cp.b->postRecv(buf0.data(), 16, 3, 1);
    cp.b->postRecv(buf1.data(), 16, 3, 2);
    cp.a->postSend(msg.data(), 16, 3, 1);
    Pump pa({cp.a.get()});
    pa.until([&] { return !cp.a->busy(); });
    cp.a->shutdown(reason, Errc::Remote);
    Caught c = capture([&] { pump.until([] { return false; }); });
    REQUIRE(c.peerFailure);
    CHECK(contains(c.what, reason));
    CHECK(std::equal(msg.begin(), msg.end(), buf0.begin()));
    CHECK(allCanary(buf1));
  }
  SECTION("a long reason is cut to kMaxAbortText") {
    std::string longReason(3000, 'x');
    for (size_t i = 0; i < longReason.size(); ++i) longReason[i] = static_cast<char>('a' + i % 26);
    std::vector<uint8_t> buf(32, kCanary);
    cp.b->postRecv(buf.data(), 16, 3, 1);
    cp.a->shutdown(longReason, Errc::Remote);
    Caught c = capture([&] { pump.until([] { return false; }); });
    REQUIRE(c.peerFailure);
    CHECK(c.what == longReason.substr(0, kMaxAbortText));
  }
  SECTION("an empty reason and unprintable bytes") {
    std::vector<uint8_t> buf(32, kCanary);
    cp.b->postRecv(buf.data(), 16, 3, 1);
    cp.a->shutdown(std::string("a\x01\n") + "b", Errc::Remote);
    Caught c = capture([&] { pump.until([] { return false; }); });
    REQUIRE(c.peerFailure);
    CHECK(c.what == "a??b");
  }

  // The side that shut down: idle, nothing to poll, and progress() says it is closed.
  CHECK(!cp.a->busy());
  std::vector<pollfd> fds;
  cp.a->addPollFds(fds);
  CHECK(fds.empty());
  std::vector<Cookie> got;
  Caught c2 = capture([&] { cp.a->progress(got); });
  REQUIRE(c2.hora);
  CHECK(c2.code == Errc::Remote);
  CHECK(contains(c2.what, "closed"));
}

TEST_CASE("tcp connection: EOF while a receive is posted", "[tcp]") {
  SECTION("peer closes before sending anything") {
    ConnPair cp = makePair(2);
    std::vector<uint8_t> buf(32, kCanary);
    cp.b->postRecv(buf.data(), 16, 3, 1);
    cp.a.reset();  // destroyed without a shutdown: no abort frame, just EOF
    Pump pump({cp.b.get()});
    Caught c = capture([&] { pump.until([] { return false; }); });
    REQUIRE(c.hora);
    CHECK(!c.peerFailure);
    CHECK(c.code == Errc::Remote);
    CHECK(contains(c.what, "closed"));
    CHECK(allCanary(buf));
  }
  SECTION("peer closes in the middle of a payload") {
    RawPeer rp;
    std::vector<uint8_t> buf(128, kCanary);
    rp.conn->postRecv(buf.data(), 100, 3, 1);
    rp.writeHeader(0, FrameType::Data, 0, 100, 3);
    std::vector<uint8_t> part = unit::pattern(30, 9);
    unit::rawWrite(rp.fd(0), part.data(), part.size());
    rp.raw.reset();
    Pump pump({rp.conn.get()});
    Caught c = capture([&] { pump.until([] { return false; }); });
    REQUIRE(c.hora);
    CHECK(c.code == Errc::Remote);
    CHECK(contains(c.what, "closed"));
    CHECK(allCanary(buf, 100));  // nothing past the posted length
  }
  SECTION("peer closes in the middle of an abort text") {
    RawPeer rp;
    std::vector<uint8_t> buf(16, kCanary);
    rp.conn->postRecv(buf.data(), 16, 3, 1);
    rp.writeHeader(0, FrameType::Abort, 0, 50, 0);
    unit::rawWrite(rp.fd(0), "partial", 7);
    rp.raw.reset();
    Pump pump({rp.conn.get()});
    Caught c = capture([&] { pump.until([] { return false; }); });
    REQUIRE(c.hora);
    CHECK(c.code == Errc::Remote);
    CHECK(allCanary(buf));
  }
}

TEST_CASE("tcp connection: sending to a closed peer is a Remote error", "[tcp]") {
  RawPeer rp;
  std::vector<uint8_t> msg = unit::pattern(1 << 20, 3);
  rp.conn->postSend(msg.data(), msg.size(), 1, 1);
  rp.raw.reset();
  Pump pump({rp.conn.get()});
  Caught c = capture([&] { pump.until([&] { return !rp.conn->busy(); }); });
  REQUIRE(c.hora);
  CHECK(c.code == Errc::Remote);
  CHECK(contains(c.what, "rank 7"));
}

// Small receives posted one after another are read together, as far as their frames go (a batch
// of call checks in one recv()): what comes after a frame belongs to the next receive, and an
// abort frame among them is the peer's account, even when it is shorter than the frame the
// next receive expects and the peer then closes.
TEST_CASE("tcp connection: small frames read ahead for the receives posted behind", "[tcp]") {
  RawPeer rp;
  std::vector<uint8_t> a(8, kCanary), b(8, kCanary), c(64, kCanary);
  rp.conn->postRecv(a.data(), 4, 5, 1);
  rp.conn->postRecv(b.data(), 4, 6, 2);
  rp.conn->postRecv(c.data(), 40, 7, 3);
  const std::vector<uint8_t> pa = unit::pattern(4, 1), pb = unit::pattern(4, 2);
  std::vector<uint8_t> wire;
  auto add = [&](FrameType type, uint64_t seq, const std::vector<uint8_t>& payload, uint64_t tag) {
    Encoded e = encode(type, seq, payload.size(), tag);
    wire.insert(wire.end(), e.b, e.b + sizeof e.b);
    wire.insert(wire.end(), payload.begin(), payload.end());
  };
  const std::string why = "rank 7 failed: gone";
  add(FrameType::Data, 0, pa, 5);
  add(FrameType::Data, 1, pb, 6);
  add(FrameType::Abort, 0, std::vector<uint8_t>(why.begin(), why.end()), static_cast<uint64_t>(Errc::InvalidUsage));
  unit::rawWrite(rp.fd(0), wire.data(), wire.size());  // all in one write: one recv() reads them
  rp.raw.reset();
  Pump pump({rp.conn.get()});
  Caught caught = capture([&] { pump.until([] { return false; }); });
  // (The pass that completes the two receives ends in the abort, so the test sees no cookies:
  // their data is what shows they completed.)
  CHECK(std::equal(pa.begin(), pa.end(), a.begin()));
  CHECK(std::equal(pb.begin(), pb.end(), b.begin()));
  CHECK(allCanary(a, 4));
  CHECK(allCanary(b, 4));
  CHECK(allCanary(c));
  REQUIRE(caught.peerFailure);
  CHECK(caught.code == Errc::InvalidUsage);
  CHECK(caught.what == why);
}

// A Reduce's leaf runs calls ahead of its parent: the parent's receive of a small frame takes
// whatever has come behind it in the same recv(), and the frames there wait for their
// receives, for the call check's look at waiting frames, and for the search for an abort.
TEST_CASE("tcp connection: what came behind a small frame is read with it and waits for its receive", "[tcp]") {
  auto ends = unit::socketPair();
  Fd peer = std::move(ends.second);
  const int mine = ::dup(ends.first.get());  // to ask the kernel what is still unread
  REQUIRE(mine >= 0);
  Fd mineKept(mine);
  std::vector<Fd> socks;
  socks.push_back(std::move(ends.first));
  tcp::Connection conn(std::move(socks), "rank 7 (raw peer)");
  const std::vector<uint8_t> p0 = unit::pattern(4, 1), p1 = unit::pattern(8, 2), p2 = unit::pattern(16, 3);
  const std::string why = "rank 7 (far, pid 9) exited or crashed";
  std::vector<uint8_t> wire;
  auto add = [&](FrameType type, uint64_t seq, const void* payload, size_t bytes, uint64_t tag) {
    Encoded e = encode(type, seq, bytes, tag);
    wire.insert(wire.end(), e.b, e.b + sizeof e.b);
    wire.insert(wire.end(), static_cast<const uint8_t*>(payload), static_cast<const uint8_t*>(payload) + bytes);
  };
  add(FrameType::Data, 0, p0.data(), p0.size(), 5);
  add(FrameType::Data, 1, p1.data(), p1.size(), 6);
  add(FrameType::Data, 2, p2.data(), p2.size(), 7);
  add(FrameType::Abort, 0, why.data(), why.size(), static_cast<uint64_t>(Errc::Remote));
  unit::rawWrite(peer.get(), wire.data(), wire.size());
  peer.reset();  // the peer is gone: nothing more comes

  std::vector<uint8_t> a(8, kCanary), b(16, kCanary);
  conn.postRecv(a.data(), p0.size(), 5, 1);
  Pump pump({&conn});
  pump.until([&] { return pump.has(&conn, 1); });
  CHECK(std::equal(p0.begin(), p0.end(), a.begin()));
  CHECK(allCanary(a, p0.size()));
  int unread = -1;
  REQUIRE(::ioctl(mineKept.get(), FIONREAD, &unread) == 0);
  CHECK(unread == 0);  // all of it read with the first frame

  // The next frame is seen where it waits, and taken by its receive from there.
  uint16_t call = 0;
  uint64_t tag = 0;
  REQUIRE(conn.pendingFrame(&call, &tag));
  CHECK(tag == 6);
  conn.postRecv(b.data(), p1.size(), 6, 2);
  pump.until([&] { return pump.has(&conn, 2); });
  CHECK(std::equal(p1.begin(), p1.end(), b.begin()));
  CHECK(allCanary(b, p1.size()));

  // A send to the gone peer fails with its own account, found behind the frame nobody took.
  const uint8_t byte = 1;
  conn.postSend(&byte, 1, 9, 3);
  Caught c = capture([&] { pump.until([] { return false; }); });
  REQUIRE(c.peerFailure);
  CHECK(c.code == Errc::Remote);
  CHECK(c.what == why);
}

// Frames read ahead are taken from where they lie in the read buffer, and a frame cut at the
// buffer's end is completed from the socket: every payload arrives whole and in order, whether a
// receive, a group of receives, the check's look and take, or a large frame's receive (straight
// into the caller's buffer) comes next.
TEST_CASE("tcp connection: many frames read ahead are taken in turn, across the buffer's end", "[tcp]") {
  auto ends = unit::socketPair();
  Fd peer = std::move(ends.second);
  std::vector<Fd> socks;
  socks.push_back(std::move(ends.first));
  tcp::Connection conn(std::move(socks), "rank 3 (raw peer)");
  constexpr size_t kFrames = 150;
  std::vector<size_t> sizes(kFrames);
  std::vector<std::vector<uint8_t>> payloads(kFrames);
  std::vector<uint8_t> wire;
  for (size_t i = 0; i < kFrames; ++i) {
    // 1 to 211 bytes, a check's byte every 5th, a frame larger than the read buffer every 31st
    sizes[i] = i % 5 == 0 ? 1 : i % 31 == 17 ? tcp::Connection::kSmallPayload + 904 : 1 + (i * 37) % 211;
    payloads[i] = unit::pattern(sizes[i], static_cast<uint8_t>(i));
    Encoded e = encode(FrameType::Data, i, sizes[i], 1000 + i);
    wire.insert(wire.end(), e.b, e.b + sizeof e.b);
    wire.insert(wire.end(), payloads[i].begin(), payloads[i].end());
  }
  REQUIRE(wire.size() > 4 * (kFrameHeaderBytes + tcp::Connection::kSmallPayload));  // several buffers' worth
  unit::rawWrite(peer.get(), wire.data(), wire.size());

  Pump pump({&conn});
  Cookie next = 1;
  size_t taken = 0, received = 0;
  auto accept = [](void* ctx, size_t, uint16_t, uint64_t tag) { return tag == *static_cast<uint64_t*>(ctx); };
  for (size_t i = 0; i < kFrames;) {
    if (i % 5 == 0 && i % 10 == 0) {  // a check's byte: seen where it waits, and taken there
      uint16_t call = 1;
      uint64_t tag = 0;
      pump.until([&] { return conn.pendingFrame(&call, &tag); });
      CHECK(tag == 1000 + i);
      CHECK(call == 0);
      uint64_t want = 1000 + i;
      REQUIRE(conn.takePendingFrames(1, accept, &want) == 1);
      ++taken;
      ++i;
      continue;
    }
    // Up to three receives at once, each with room for more than its frame.
    const size_t group = std::min<size_t>(1 + i % 3, kFrames - i);
    std::vector<std::vector<uint8_t>> bufs;
    std::vector<Cookie> cookies;
    size_t k = 0;
    for (; k < group && !(k > 0 && (i + k) % 10 == 0); ++k) {
      bufs.emplace_back(sizes[i + k] + 8, kCanary);
      cookies.push_back(next);
      conn.postRecv(bufs.back().data(), sizes[i + k], 1000 + i + k, next++);
    }
    pump.until([&] { return pump.has(&conn, cookies.back()); });
    for (size_t j = 0; j < k; ++j) {
      CHECK(pump.has(&conn, cookies[j]));
      CHECK(std::equal(payloads[i + j].begin(), payloads[i + j].end(), bufs[j].begin()));
      CHECK(allCanary(bufs[j], sizes[i + j]));
      ++received;
    }
    i += k;
  }
  CHECK(taken + received == kFrames);
  CHECK(taken == kFrames / 10);
  uint16_t call = 0;
  uint64_t tag = 0;
  CHECK_FALSE(conn.pendingFrame(&call, &tag));  // nothing left behind
}

TEST_CASE("tcp connection: held sends wait for a later send, a batch or a release, in their place", "[tcp]") {
  ConnPair cp = makePair(2);  // consecutive messages go on different sockets: their order must hold across them
  Pump pump({cp.a.get(), cp.b.get()});
  uint16_t call = 0;
  uint64_t tag = 0;
  Cookie next = 1;

  // Held: complete at once (the byte is copied), nothing on the wire, not busy.
  uint8_t byte = 0x11;
  cp.a->postHeld(&byte, 1, 9, next);
  byte = 0x22;  // the held message keeps what it was posted with
  REQUIRE(cp.a->holding());
  pump.until([&] { return pump.has(cp.a.get(), next); });
  ++next;
  CHECK_FALSE(cp.a->busy());
  CHECK_FALSE(cp.b->pendingFrame(&call, &tag));

  // A later send takes it along, ahead of itself.
  const std::vector<uint8_t> big = unit::pattern(100, 3);
  cp.a->postSend(big.data(), big.size(), 10, next++);
  CHECK_FALSE(cp.a->holding());
  std::vector<uint8_t> first(4, kCanary), second(100, kCanary);
  cp.b->postRecv(first.data(), 1, 9, 101);  // a frame out of its place would fail these
  cp.b->postRecv(second.data(), 100, 10, 102);
  pump.until([&] { return pump.has(cp.b.get(), 102) && !cp.a->busy(); });
  CHECK(pump.has(cp.b.get(), 101));
  CHECK(first[0] == 0x11);
  CHECK(allCanary(first, 1));
  CHECK(second == big);

  // kHeldMost held go out on their own, in one batch.
  std::vector<uint8_t> sent(tcp::Connection::kHeldMost), recv(tcp::Connection::kHeldMost, kCanary);
  for (size_t i = 0; i < sent.size(); ++i) {
    sent[i] = static_cast<uint8_t>(0x40 + i);
    CHECK(cp.a->holding() == (i > 0));
    cp.a->postHeld(&sent[i], 1, 20 + i, next++);
  }
  CHECK_FALSE(cp.a->holding());
  for (size_t i = 0; i < recv.size(); ++i) cp.b->postRecv(&recv[i], 1, 20 + i, static_cast<Cookie>(200 + i));
  pump.until([&] { return pump.has(cp.b.get(), static_cast<Cookie>(200 + recv.size() - 1)); });
  CHECK(recv == sent);

  // Fewer: out once released (as before this rank waits), and busy until they are.
  std::vector<uint8_t> three = {7, 8, 9}, got3(3, kCanary);
  for (size_t i = 0; i < 3; ++i) cp.a->postHeld(&three[i], 1, 40, next++);
  pump.until([&] { return pump.has(cp.a.get(), next - 1); });
  CHECK_FALSE(cp.a->busy());
  CHECK_FALSE(cp.b->pendingFrame(&call, &tag));
  CHECK(cp.a->releaseHeld());
  CHECK_FALSE(cp.a->releaseHeld());  // once
  CHECK(cp.a->busy());
  for (size_t i = 0; i < 3; ++i) cp.b->postRecv(&got3[i], 1, 40, static_cast<Cookie>(300 + i));
  pump.until([&] { return pump.has(cp.b.get(), 302) && !cp.a->busy(); });
  CHECK(got3 == three);
  CHECK_FALSE(cp.a->holding());
  CHECK_FALSE(cp.a->releaseHeld());  // nothing held
}

// The frames no receive wants yet (call checks a rank compares while it waits): taken together,
// in their order across the sockets, as far as the caller agrees and no further.
TEST_CASE("tcp connection: waiting frames are taken in order, as far as the caller agrees", "[tcp]") {
  ConnPair cp = makePair(2);  // frame k on socket k % 2: the order must hold across them
  Pump pump({cp.a.get(), cp.b.get()});
  constexpr size_t kFrames = 40;
  std::vector<uint8_t> bytes(kFrames);
  Cookie next = 1;
  for (size_t i = 0; i < kFrames; ++i) {
    bytes[i] = static_cast<uint8_t>(i);
    cp.a->setCall(static_cast<uint16_t>(100 + i));
    cp.a->postHeld(&bytes[i], 1, 500 + i, next++);
  }
  CHECK(cp.a->releaseHeld());
  pump.until([&] { return !cp.a->busy(); });
  struct Seen {
    std::vector<std::pair<uint16_t, uint64_t>> frames;
    size_t agree = 0;  // how many the caller agrees to
  } seen;
  auto accept = [](void* ctx, size_t i, uint16_t call, uint64_t tag) {
    auto* s = static_cast<Seen*>(ctx);
    CHECK(i == s->frames.size());  // each frame once, in order, before it is taken
    s->frames.emplace_back(call, tag);
    return s->frames.size() <= s->agree;
  };
  // Nothing: a receive is posted (what waits is its).
  std::vector<uint8_t> one(1, kCanary);
  cp.b->postRecv(one.data(), 1, 500, 1);
  CHECK(cp.b->takePendingFrames(kFrames, accept, &seen) == 0);
  pump.until([&] { return pump.has(cp.b.get(), 1); });
  CHECK(one[0] == 0);
  // Refused: nothing taken, the first shown again.
  seen.agree = 0;
  CHECK(cp.b->takePendingFrames(kFrames, accept, &seen) == 0);
  REQUIRE(seen.frames.size() == 1);
  CHECK(seen.frames[0] == std::make_pair(uint16_t(101), uint64_t(501)));
  // Agreed to 10 of them: those taken, the 11th left where it was.
  seen = Seen{{}, 10};
  CHECK(cp.b->takePendingFrames(kFrames, accept, &seen) == 10);
  REQUIRE(seen.frames.size() == 11);
  for (size_t i = 0; i < seen.frames.size(); ++i)
    CHECK(seen.frames[i] == std::make_pair(static_cast<uint16_t>(101 + i), static_cast<uint64_t>(501 + i)));
  uint16_t call = 0;
  uint64_t tag = 0;
  REQUIRE(cp.b->pendingFrame(&call, &tag));
  CHECK(call == 111);
  CHECK(tag == 511);
  // At most `most`, then the rest by receives, in their place.
  seen = Seen{{}, kFrames};
  CHECK(cp.b->takePendingFrames(5, accept, &seen) == 5);
  std::vector<uint8_t> rest(kFrames - 16, kCanary);
  for (size_t i = 0; i < rest.size(); ++i)
    cp.b->postRecv(&rest[i], 1, 516 + i, static_cast<Cookie>(100 + i));
  pump.until([&] { return pump.has(cp.b.get(), static_cast<Cookie>(100 + rest.size() - 1)); });
  for (size_t i = 0; i < rest.size(); ++i) CHECK(rest[i] == 16 + i);
  CHECK(cp.b->takePendingFrames(kFrames, accept, &seen) == 0);  // none left
}

TEST_CASE("tcp connection: held sends to a peer that closed are dropped, a send there still fails", "[tcp]") {
  RawPeer rp;
  rp.raw.reset();  // the peer closed its end (it closed its communicator)
  Pump pump({rp.conn.get()});
  uint8_t byte = 1;
  Cookie next = 1;
  for (int i = 0; i < 3; ++i) {  // each completes; their writes fail (or go to a closed end) quietly
    rp.conn->postHeld(&byte, 1, 5, next);
    if (i == 0) CHECK(rp.conn->releaseHeld());
    else (void)rp.conn->releaseHeld();  // nothing to release once a write failed: those are dropped at once
    Caught c = capture([&] { pump.until([&] { return pump.has(rp.conn.get(), next) && !rp.conn->busy(); }); });
    CHECK_FALSE(c.thrown);
    CHECK_FALSE(rp.conn->holding());
    ++next;
  }
  std::vector<uint8_t> msg = unit::pattern(64, 3);
  rp.conn->postSend(msg.data(), msg.size(), 6, next);
  Caught c = capture([&] { pump.until([&] { return !rp.conn->busy(); }); });
  REQUIRE(c.hora);
  CHECK(c.code == Errc::Remote);
  CHECK(contains(c.what, "rank 7"));
}

// A peer that sent its last frame and closed: this side's held check, released while it waits
// for that frame, fails to go out; the frame is still received (the failed write must not skip
// past what the peer sent, as a failed send of data does to find the peer's abort frame).
TEST_CASE("tcp connection: a held send that fails leaves the peer's last frames to the receives", "[tcp]") {
  RawPeer rp;
  const std::vector<uint8_t> last = unit::pattern(4, 9);
  std::vector<uint8_t> wire;
  Encoded e = encode(FrameType::Data, 0, last.size(), 5);
  wire.insert(wire.end(), e.b, e.b + sizeof e.b);
  wire.insert(wire.end(), last.begin(), last.end());
  unit::rawWrite(rp.fd(0), wire.data(), wire.size());
  rp.raw.reset();  // the peer is done and closed its end
  std::vector<uint8_t> got(8, kCanary);
  rp.conn->postRecv(got.data(), last.size(), 5, 1);
  uint8_t byte = 3;
  rp.conn->postHeld(&byte, 1, 6, 2);
  CHECK(rp.conn->releaseHeld());
  Pump pump({rp.conn.get()});
  Caught c = capture([&] { pump.until([&] { return pump.has(rp.conn.get(), 1) && pump.has(rp.conn.get(), 2); }); });
  CHECK_FALSE(c.thrown);
  CHECK(std::equal(last.begin(), last.end(), got.begin()));
  CHECK(allCanary(got, last.size()));
}

// A peer that fails finishes the frame it had begun, sends its account (an abort frame) and
// closes. A send that then fails looks for that account behind what has come on its socket (a
// receive inside a frame takes the rest first) and on the connection's other sockets (one where
// the peer's send had stopped inside a frame has none); so does a receive that meets the end.
TEST_CASE("tcp connection: a peer's account is found behind a frame it finished, or on another socket", "[tcp]") {
  const std::string reason = "rank 2 (far, pid 9) exited or crashed";
  const std::vector<uint8_t> data = unit::pattern(size_t(1) << 16, 4);
  std::vector<uint8_t> buf(data.size() + 8, kCanary);
  const auto writeAbort = [&](RawPeer& rp, int sock) {
    rp.writeHeader(sock, FrameType::Abort, 0, reason.size(), static_cast<uint64_t>(Errc::Remote));
    unit::rawWrite(rp.fd(sock), reason.data(), reason.size());
  };
  const uint8_t byte = 1;
  SECTION("behind the frame a receive was inside") {
    RawPeer rp;
    rp.conn->postRecv(buf.data(), data.size(), 3, 1);
    rp.writeHeader(0, FrameType::Data, 0, data.size(), 3);
    unit::rawWrite(rp.fd(0), data.data(), 1024);
    Pump pump({rp.conn.get()});
    pump.stepOnce();  // inside the frame
    unit::rawWrite(rp.fd(0), data.data() + 1024, data.size() - 1024);
    writeAbort(rp, 0);
    rp.raw.reset();
    rp.conn->postSend(&byte, 1, 5, 2);  // to a closed end: the send fails
    Caught c = capture([&] { pump.until([] { return false; }); });
    REQUIRE(c.peerFailure);
    CHECK(c.code == Errc::Remote);
    CHECK(c.what == reason);
    CHECK(std::equal(data.begin(), data.end(), buf.begin()));  // the receive got what came
    CHECK(allCanary(buf, data.size()));
  }
  SECTION("on another socket, the send's stopped inside a frame") {
    RawPeer rp(2);
    rp.conn->postRecv(buf.data(), data.size(), 3, 1);  // socket 0
    rp.writeHeader(0, FrameType::Data, 0, data.size(), 3);
    unit::rawWrite(rp.fd(0), data.data(), 1024);
    writeAbort(rp, 1);
    const bool sending = GENERATE(true, false);
    INFO((sending ? "a send fails" : "the receive meets the end"));
    Pump pump({rp.conn.get()});
    pump.stepOnce();
    rp.raw.reset();
    rp.raws[1].reset();
    if (sending) rp.conn->postSend(&byte, 1, 5, 2);  // socket 0
    Caught c = capture([&] { pump.until([] { return false; }); });
    REQUIRE(c.peerFailure);
    CHECK(c.what == reason);
    CHECK(allCanary(buf, data.size()));
  }
}
