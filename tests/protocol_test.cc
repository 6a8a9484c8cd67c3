// The control protocol (cachectl/protocol.h): every request and reply
// round-trips, bad input is one clear error, and the daemon's dispatch
// (cachectl/request_dispatch.h) checks permission and routes each verb.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "protocol.h"
#include "request_dispatch.h"

namespace cachectl {
namespace {

using cachecore::CacheMode;
using cachecore::PlacementWindow;
using cachecore::Result;
using cachecore::Status;
using cachecore::StatusCode;

std::string WithoutNewline(std::string line) {
  EXPECT_FALSE(line.empty());
  EXPECT_EQ(line.back(), '\n');
  line.pop_back();
  return line;
}

// Encodes, decodes and encodes again: the same line both times.
std::string RoundTrip(const Request& request) {
  std::string line = EncodeRequest(request);
  Result<Request> back = DecodeRequest(WithoutNewline(line));
  EXPECT_TRUE(back.ok()) << line << ": " << back.status().message();
  if (back.ok()) {
    EXPECT_EQ(EncodeRequest(back.value()), line);
  }
  return line;
}

TEST(ProtocolTest, EveryVerbRoundTrips) {
  EXPECT_EQ(RoundTrip(StatsRequest{}), "cachectl/2 stats\n");
  EXPECT_EQ(RoundTrip(StatsRequest{true}), "cachectl/2 stats reset\n");
  EXPECT_EQ(RoundTrip(FlushRequest{}), "cachectl/2 flush\n");
  EXPECT_EQ(RoundTrip(DetachRequest{}), "cachectl/2 detach\n");
  EXPECT_EQ(RoundTrip(DetachRequest{true}), "cachectl/2 detach wipe\n");
  EXPECT_EQ(RoundTrip(StopRequest{}), "cachectl/2 stop\n");
  EXPECT_EQ(RoundTrip(PinRequest{{4096, 1ull << 40}, ""}), "cachectl/2 pin 4096 1099511627776\n");
  EXPECT_EQ(RoundTrip(UnpinRequest{{0, 65536}, ""}), "cachectl/2 unpin 0 65536\n");
  EXPECT_EQ(RoundTrip(PinRequest{{4096, 8192}, "logs"}), "cachectl/2 pin 4096 8192 logs\n");
  EXPECT_EQ(RoundTrip(UnpinRequest{{0, 65536}, "logs"}), "cachectl/2 unpin 0 65536 logs\n");
  EXPECT_EQ(RoundTrip(PinsRequest{}), "cachectl/2 pins\n");
  EXPECT_EQ(RoundTrip(MovementRequest{}), "cachectl/2 movement\n");
  EXPECT_EQ(RoundTrip(HistoryRequest{}), "cachectl/2 history\n");
  EXPECT_EQ(RoundTrip(AddVolumeRequest{"db", "/srv/a b"}), "cachectl/2 add-volume db 2f7372762f612062\n");
  EXPECT_EQ(RoundTrip(RemoveVolumeRequest{"db"}), "cachectl/2 remove-volume db\n");
}

TEST(ProtocolTest, SetCarriesOnlyTheFieldsGivenInBytes) {
  SetRequest all;
  all.mode = CacheMode::kWriteBack;
  all.seq_cutoff_bytes = 4u << 20;
  all.dirty_high_pct = 70;
  all.dirty_low_pct = 30;
  all.cleaner_batch_lines = 32;
  all.placement_window.emplace(PlacementWindow{60, 300});
  all.placement_rate_bytes = 32u << 20;
  EXPECT_EQ(RoundTrip(all),
            "cachectl/2 set mode=writeback seq_cutoff=4194304 dirty_high=70 dirty_low=30 cleaner_batch=32 "
            "placement_window=01:00-05:00 placement_rate=33554432\n");

  SetRequest off;
  off.placement_window.emplace();  // given, and off
  EXPECT_EQ(RoundTrip(off), "cachectl/2 set placement_window=off\n");
  Result<Request> decoded = DecodeRequest("cachectl/2 set placement_window=off");
  ASSERT_TRUE(decoded.ok());
  const SetRequest& set = std::get<SetRequest>(decoded.value());
  ASSERT_TRUE(set.placement_window.has_value());
  EXPECT_FALSE(set.placement_window->has_value());
  EXPECT_FALSE(set.mode || set.seq_cutoff_bytes || set.dirty_high_pct || set.placement_rate_bytes);

  SetRequest zero;
  zero.seq_cutoff_bytes = 0;  // 0 turns the cutoff off: given, not absent
  EXPECT_EQ(RoundTrip(zero), "cachectl/2 set seq_cutoff=0\n");

  SetRequest volume;  // a volume's own cutoff, or the cache's again
  volume.volume = "logs";
  volume.seq_cutoff_bytes = 262144;
  EXPECT_EQ(RoundTrip(volume), "cachectl/2 set volume=logs seq_cutoff=262144\n");
  volume.seq_cutoff_bytes.reset();
  volume.seq_cutoff_of_cache = true;
  EXPECT_EQ(RoundTrip(volume), "cachectl/2 set volume=logs seq_cutoff=cache\n");
  for (const char* bad : {"cachectl/2 set volume=logs mode=writeback", "cachectl/2 set seq_cutoff=cache",
                          "cachectl/2 set volume=../x seq_cutoff=1", "cachectl/2 set volume=a volume=b seq_cutoff=1",
                          "cachectl/2 set volume=a seq_cutoff=cache seq_cutoff=1", "cachectl/2 pin 0 4096 ../x"}) {
    EXPECT_FALSE(DecodeRequest(bad).ok()) << bad;
  }
}

TEST(ProtocolTest, BadRequestsAreOneLineErrors) {
  const std::vector<std::string> bad = {
      "",
      "cachectl/1 stats",
      "cachectl/2",
      "cachectl/2 ",
      "cachectl/2 stats ",
      "cachectl/2  stats",
      "cachectl/2 frobnicate",
      "cachectl/2 stats now",
      "cachectl/2 stats reset reset",
      "cachectl/2 detach please",
      "cachectl/2 flush now",
      "cachectl/2 pin 0",
      "cachectl/2 pin 0 1 vol extra",
      "cachectl/2 add-volume db",
      "cachectl/2 add-volume ../db 2f61",
      "cachectl/2 add-volume db 6162",   // "ab": not absolute
      "cachectl/2 add-volume db 2f6",    // odd length
      "cachectl/2 add-volume db 2fzz",
      "cachectl/2 add-volume db 2f00",   // a NUL in the path
      "cachectl/2 add-volume db 2f610a62",  // a newline in the path
      "cachectl/2 remove-volume",
      "cachectl/2 remove-volume db now",
      "cachectl/2 remove-volume .db",
      "cachectl/2 pin -1 4096",
      "cachectl/2 pin +1 4096",
      "cachectl/2 pin 0x10 4096",
      "cachectl/2 unpin 0 18446744073709551616",
      "cachectl/2 set",
      "cachectl/2 set mode",
      "cachectl/2 set mode=sideways",
      "cachectl/2 set mode=wb mode=wt",
      "cachectl/2 set colour=blue",
      "cachectl/2 set seq_cutoff=1M",
      "cachectl/2 set dirty_high=4294967296",
      "cachectl/2 set placement_rate=0",
      "cachectl/2 set placement_window=25:00-01:00",
      "cachectl/2 set =1",
      "cachectl/2 stats\nreset",
      "cachectl/2 pins " + std::string(kMaxLineBytes, 'x'),
  };
  for (const std::string& line : bad) {
    Result<Request> r = DecodeRequest(line);
    ASSERT_FALSE(r.ok()) << line;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << line;
    EXPECT_EQ(r.status().message().find('\n'), std::string::npos) << line;
    EXPECT_LT(r.status().message().size(), 200u) << line;
  }
  EXPECT_EQ(DecodeRequest("cachectl/1 stats").status().message(),
            "unsupported protocol (this daemon speaks cachectl/2)");
  EXPECT_EQ(DecodeRequest("cachectl/2 frobnicate").status().message(), "unknown control command 'frobnicate'");
  EXPECT_EQ(DecodeRequest("cachectl/2 pin 1").status().message(), "pin needs OFFSET LENGTH");
}

TEST(ProtocolTest, OnlyReadsArePermittedToEveryone) {
  EXPECT_FALSE(ChangesCache(StatsRequest{}));
  EXPECT_FALSE(ChangesCache(PinsRequest{}));
  EXPECT_FALSE(ChangesCache(MovementRequest{}));
  EXPECT_FALSE(ChangesCache(HistoryRequest{}));
  for (const Request& r : std::vector<Request>{StatsRequest{true}, FlushRequest{}, DetachRequest{}, StopRequest{},
                                               SetRequest{}, PinRequest{}, UnpinRequest{}}) {
    EXPECT_TRUE(ChangesCache(r)) << EncodeRequest(r);
  }
}

TEST(ProtocolTest, ExitCodesMapBothWays) {
  EXPECT_EQ(ExitCodeOf(Status::Ok()), kExitOk);
  EXPECT_EQ(ExitCodeOf(Status::InvalidArgument("x")), kExitUsage);
  EXPECT_EQ(ExitCodeOf(Status::OutOfRange("x")), kExitUsage);
  EXPECT_EQ(ExitCodeOf(Status::NotFound("x")), kExitNotFound);
  EXPECT_EQ(ExitCodeOf(Status::Busy("x")), kExitRefused);
  EXPECT_EQ(ExitCodeOf(Status::Mismatch("x")), kExitRefused);
  EXPECT_EQ(ExitCodeOf(Status::IoError("x")), kExitFailed);
  for (ExitCode code : {kExitFailed, kExitUsage, kExitNotFound, kExitRefused}) {
    Status s = StatusOfExitCode(code, "why");
    EXPECT_EQ(ExitCodeOf(s), code);
    EXPECT_EQ(s.message(), "why");
  }
}

TEST(ProtocolTest, AnswerLines) {
  Result<ReplyLine> p = DecodeReplyLine(WithoutNewline(EncodeProgress(3, 10)));
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->kind, ReplyLine::kProgress);
  EXPECT_EQ(p->left, 3u);
  EXPECT_EQ(p->total, 10u);
  EXPECT_EQ(DecodeReplyLine("ok")->kind, ReplyLine::kOk);
  Result<ReplyLine> d = DecodeReplyLine("data origin=/dev/a=b c");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->key, "origin");
  EXPECT_EQ(d->value, "/dev/a=b c");

  // A message with a line break stays one line, and keeps its exit code.
  std::string end = EncodeEnd(Status::Busy("in use\nby someone"));
  EXPECT_EQ(end, "error 4 in use by someone\n");
  Result<ReplyLine> e = DecodeReplyLine(WithoutNewline(end));
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->kind, ReplyLine::kError);
  EXPECT_EQ(e->exit_code, kExitRefused);
  EXPECT_EQ(e->message, "in use by someone");
  EXPECT_EQ(EncodeEnd(Status::Ok()), "ok\n");

  for (const char* bad : {"", "okay", "ok ", "progress 1", "progress 1 2 3", "progress -1 2", "data", "data =x",
                          "data a b=c", "error 0 fine", "error 5 x", "error x y", "error", "warning 1 x"}) {
    EXPECT_FALSE(DecodeReplyLine(bad).ok()) << bad;
  }
}

TEST(ProtocolTest, RepliesRoundTrip) {
  PinsReply pins{{8192, 4096, 1 << 20}, {{0, 4096, 4096}, {65536, 4096, 0}}, {"", "logs"}};
  std::string text = EncodeReply(pins);
  Fields data;
  size_t start = 0;
  while (start < text.size()) {
    size_t nl = text.find('\n', start);
    Result<ReplyLine> line = DecodeReplyLine(std::string_view(text).substr(start, nl - start));
    ASSERT_TRUE(line.ok());
    data.emplace_back(line->key, line->value);
    start = nl + 1;
  }
  Result<PinsReply> back = DecodePinsReply(data);
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(EncodeReply(back.value()), text);
  EXPECT_EQ(back->volumes, (std::vector<std::string>{"", "logs"}));

  MovementReply movement;
  movement.placement.window = PlacementWindow{22 * 60, 4 * 60};
  movement.placement.rate_bytes_per_s = 96u << 20;
  movement.region_bytes = 1 << 20;
  movement.hours.push_back({1700000000 / 3600 * 3600, 1, 2, 3, 4, 5, 6, 7});
  movement.hottest.push_back({0, 1 << 20, 224, 65536});
  Fields m = {{"placement_window", "22:00-04:00"}, {"placement_rate", "100663296"}, {"region_bytes", "1048576"},
              {"hour", "1699999200,1,2,3,4,5,6,7"}, {"hot", "0,1048576,224,65536"}};
  Result<MovementReply> mb = DecodeMovementReply(m);
  ASSERT_TRUE(mb.ok()) << mb.status().message();
  EXPECT_EQ(EncodeReply(mb.value()), EncodeReply(movement));

  HistoryReply history{65536, {{1700000040, 1, 2, 3, 4, 5, 6, 7}, {1700000100, 0, 0, 0, 0, 5, 0, 0}}};
  Fields h = {{"line_size", "65536"}, {"minute", "1700000040,1,2,3,4,5,6,7"}, {"minute", "1700000100,0,0,0,0,5,0,0"}};
  Result<HistoryReply> hb = DecodeHistoryReply(h);
  ASSERT_TRUE(hb.ok()) << hb.status().message();
  EXPECT_EQ(EncodeReply(hb.value()), EncodeReply(history));
  EXPECT_FALSE(DecodeHistoryReply({{"line_size", "1"}, {"minute", "1,2,3"}}).ok());
  EXPECT_FALSE(DecodeHistoryReply({{"minute", "60,1,2,3,4,5,6,7"}}).ok());  // no line size

  Result<StartupReply> startup = DecodeStartupReply({{"notice", "superblock rewritten"}});
  ASSERT_TRUE(startup.ok());
  EXPECT_EQ(EncodeReply(startup.value()), "data notice=superblock rewritten\n");
}

TEST(ProtocolTest, MalformedRepliesAreRefused) {
  Fields totals = {{"pinned_bytes", "1"}, {"pinned_resident_bytes", "1"}, {"pin_limit_bytes", "2"}};
  EXPECT_TRUE(DecodePinTotals(totals).ok());
  Fields missing(totals.begin(), totals.end() - 1);
  EXPECT_EQ(DecodePinTotals(missing).status().message(), "missing field 'pin_limit_bytes'");
  Fields twice = totals;
  twice.push_back(totals[0]);
  EXPECT_FALSE(DecodePinTotals(twice).ok());
  Fields unknown = totals;
  unknown.push_back({"pin", "1,2,3"});  // pins only in a PinsReply
  EXPECT_FALSE(DecodePinTotals(unknown).ok());
  Fields short_range = totals;
  short_range.push_back({"pin", "1,2"});
  EXPECT_FALSE(DecodePinsReply(short_range).ok());
  Fields long_range = totals;
  long_range.push_back({"pin", "1,2,3,4"});
  EXPECT_FALSE(DecodePinsReply(long_range).ok());
  EXPECT_FALSE(DecodeMovementReply({{"placement_window", "nope"}, {"placement_rate", "1"}, {"region_bytes", "1"}}).ok());
  EXPECT_FALSE(DecodeStartupReply({{"state", "running"}}).ok());
  EXPECT_FALSE(DecodeStatsReply({}).ok());
}

// A cache that records what it was asked.
class FakeTarget : public ControlTarget {
 public:
  std::vector<std::string> calls;
  Status next = Status::Ok();

  Result<StatsReply> Stats(bool reset) override {
    calls.push_back(reset ? "stats reset" : "stats");
    return StatsReply{{{"mode", "writeback"}, {"dirty_lines", "3"}}};
  }
  Status Flush(const ProgressSink& progress) override {
    calls.push_back("flush");
    progress(1, 2);
    progress(0, 2);
    return next;
  }
  Status Detach(bool wipe, const ProgressSink&) override { return Record(wipe ? "detach wipe" : "detach"); }
  Status Stop() override { return Record("stop"); }
  Status Set(const SetRequest& r, const ProgressSink&) override {
    return Record("set " + std::to_string(r.dirty_high_pct.value_or(0)) + " " +
                  std::to_string(r.dirty_low_pct.has_value()));
  }
  Result<PinTotals> Pin(const ByteRange& r, const std::string&) override {
    calls.push_back("pin " + std::to_string(r.offset) + " " + std::to_string(r.length));
    return PinTotals{r.length, 0, 1 << 20};
  }
  Result<PinTotals> Unpin(const ByteRange&, const std::string&) override { return Status::NotFound("nothing pinned there"); }
  Result<PinsReply> Pins() override { return PinsReply{}; }
  Result<MovementReply> Movement() override { return MovementReply{}; }
  Result<HistoryReply> History() override { return HistoryReply{}; }
  Status AddVolume(const std::string& volume, const std::string& origin) override {
    added = volume + "=" + origin;
    return Status::Ok();
  }
  Status RemoveVolume(const std::string& volume, const ProgressSink& progress) override {
    progress(1, 2);
    removed = volume;
    return Status::Ok();
  }
  std::string added, removed;

 private:
  Status Record(const std::string& call) {
    calls.push_back(call);
    return next;
  }
};

std::vector<std::string> Serve(const std::string& line, bool may_change, FakeTarget& target) {
  std::vector<std::string> out;
  ServeRequest(line, may_change, target, [&](const std::string& text) {
    size_t start = 0;
    while (start < text.size()) {
      size_t nl = text.find('\n', start);
      out.push_back(text.substr(start, nl - start));
      start = nl + 1;
    }
  });
  return out;
}

TEST(DispatchTest, ChangesNeedPermissionReadsDoNot) {
  FakeTarget t;
  EXPECT_EQ(Serve("cachectl/2 set dirty_high=70", false, t),
            std::vector<std::string>{"error 4 permission denied: run as root"});
  EXPECT_EQ(Serve("cachectl/2 stats reset", false, t),
            std::vector<std::string>{"error 4 permission denied: run as root"});
  EXPECT_TRUE(t.calls.empty());
  EXPECT_EQ(Serve("cachectl/2 stats", false, t),
            (std::vector<std::string>{"data mode=writeback", "data dirty_lines=3", "ok"}));
  EXPECT_EQ(t.calls, std::vector<std::string>{"stats"});
}

TEST(DispatchTest, RoutesEachVerbAndAnswersOnce) {
  FakeTarget t;
  EXPECT_EQ(Serve("cachectl/2 set dirty_high=70", true, t), std::vector<std::string>{"ok"});
  EXPECT_EQ(Serve("cachectl/2 flush", true, t), (std::vector<std::string>{"progress 1 2", "progress 0 2", "ok"}));
  EXPECT_EQ(Serve("cachectl/2 pin 0 4096", true, t),
            (std::vector<std::string>{"data pinned_bytes=4096", "data pinned_resident_bytes=0",
                                      "data pin_limit_bytes=1048576", "ok"}));
  EXPECT_EQ(Serve("cachectl/2 unpin 0 4096", true, t),
            std::vector<std::string>{"error 3 nothing pinned there"});
  EXPECT_EQ(Serve("cachectl/2 detach wipe", true, t), std::vector<std::string>{"ok"});
  t.next = Status::Busy("/dev/mapper/vol is mounted");
  EXPECT_EQ(Serve("cachectl/2 stop", true, t), std::vector<std::string>{"error 4 /dev/mapper/vol is mounted"});
  EXPECT_EQ(t.calls, (std::vector<std::string>{"set 70 0", "flush", "pin 0 4096", "detach wipe", "stop"}));
}

TEST(DispatchTest, MalformedRequestsNeverReachTheCache) {
  FakeTarget t;
  EXPECT_EQ(Serve("cachectl/2 set", true, t), std::vector<std::string>{"error 2 set: nothing to set"});
  EXPECT_EQ(Serve("stats", true, t),
            std::vector<std::string>{"error 2 unsupported protocol (this daemon speaks cachectl/2)"});
  EXPECT_EQ(Serve(std::string("cachectl/2 st\0ts", 16), true, t).size(), 1u);
  EXPECT_TRUE(t.calls.empty());
}

}  // namespace
}  // namespace cachectl
