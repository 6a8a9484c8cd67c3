// The stats of caches in Prometheus's text exposition format (version
// 0.0.4): `cachectl stats NAME --prometheus`, and the daemon's /metrics
// (attach --listen). Counters end in _total, sizes in _bytes, ratios are
// gauges from 0 to 1; every sample has the labels cache and mode. Pure
// functions of the fields the daemon sends (protocol.h's Fields).
#pragma once

#include <string>
#include <vector>

#include "protocol.h"

namespace cachectl {

// One family per metric (HELP, TYPE, then a sample per cache that has the
// field): the fields of each cache as `stats` describes it (a stopped cache
// has only cachectl_up 0).
std::string PrometheusText(const std::vector<Fields>& caches);

// The metric names PrometheusText can print, in its order (for the docs' test).
std::vector<std::string> PrometheusMetricNames();

}  // namespace cachectl
