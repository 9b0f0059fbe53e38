#include "weir/runtime/metrics.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <variant>

#include <boost/json.hpp>

namespace weir {

namespace json = boost::json;

namespace {

void atomic_add(std::atomic<double>& a, double v) noexcept {
  double cur = a.load(std::memory_order_relaxed);
  while (!a.compare_exchange_weak(cur, cur + v, std::memory_order_relaxed)) {
  }
}

std::string format_number(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (std::isnan(v)) return "NaN";
  char buf[32];
  if (v == std::floor(v) && std::fabs(v) < 1e15) {
    std::snprintf(buf, sizeof buf, "%.0f", v);
  } else {
    std::snprintf(buf, sizeof buf, "%.9g", v);
  }
  return buf;
}

std::string escape_label(std::string_view v) {
  std::string out;
  for (char c : v) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '"')
      out += "\\\"";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

std::string label_text(const Labels& labels, const std::string& extra_key = {},
                       const std::string& extra_value = {}) {
  if (labels.empty() && extra_key.empty()) return {};
  std::string s = "{";
  bool first = true;
  for (const auto& [k, v] : labels) {
    s += (first ? "" : ",") + k + "=\"" + escape_label(v) + "\"";
    first = false;
  }
  if (!extra_key.empty()) s += (first ? "" : ",") + extra_key + "=\"" + extra_value + "\"";
  return s + "}";
}

std::string label_key(Labels labels) {
  std::sort(labels.begin(), labels.end());
  std::string key;
  for (const auto& [k, v] : labels) key += k + '\x1f' + v + '\x1e';
  return key;
}

}  // namespace

void Counter::inc(double v) noexcept {
  atomic_add(value_, v);
}
void Gauge::add(double v) noexcept {
  atomic_add(value_, v);
}

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(new std::atomic<std::uint64_t>[bounds_.size() + 1]) {
  std::sort(bounds_.begin(), bounds_.end());
  for (std::size_t i = 0; i <= bounds_.size(); ++i) counts_[i].store(0, std::memory_order_relaxed);
}

void Histogram::observe(double v) noexcept {
  std::size_t i = static_cast<std::size_t>(std::lower_bound(bounds_.begin(), bounds_.end(), v) -
                                           bounds_.begin());
  counts_[i].fetch_add(1, std::memory_order_relaxed);
  count_.fetch_add(1, std::memory_order_relaxed);
  atomic_add(sum_, v);
}

std::uint64_t Histogram::count() const noexcept {
  return count_.load(std::memory_order_relaxed);
}
double Histogram::sum() const noexcept {
  return sum_.load(std::memory_order_relaxed);
}

std::vector<std::uint64_t> Histogram::cumulative() const {
  std::vector<std::uint64_t> out(bounds_.size() + 1);
  std::uint64_t acc = 0;
  for (std::size_t i = 0; i <= bounds_.size(); ++i)
    out[i] = acc += counts_[i].load(std::memory_order_relaxed);
  return out;
}

double Histogram::quantile(double q) const {
  auto cum = cumulative();
  const std::uint64_t total = cum.back();
  if (total == 0) return 0.0;
  const double rank = q * static_cast<double>(total);
  for (std::size_t i = 0; i < cum.size(); ++i) {
    if (static_cast<double>(cum[i]) >= rank) {
      if (i == bounds_.size())
        return bounds_.empty() ? 0.0 : bounds_.back();  // in +Inf: the last bound
      const double lo = i == 0 ? 0.0 : bounds_[i - 1], hi = bounds_[i];
      const double below = i == 0 ? 0.0 : static_cast<double>(cum[i - 1]);
      const double in = static_cast<double>(cum[i]) - below;
      return in > 0 ? lo + (hi - lo) * (rank - below) / in : hi;
    }
  }
  return bounds_.empty() ? 0.0 : bounds_.back();
}

std::vector<double> latency_buckets_seconds() {
  std::vector<double> b;
  for (double v = 1e-6; v <= 60.0; v *= 2.5) b.push_back(v);
  return b;
}

struct Registry::Impl {
  enum class Type { counter, gauge, histogram };
  struct Series {
    Labels labels;
    std::variant<std::unique_ptr<Counter>, std::unique_ptr<Gauge>, std::unique_ptr<Histogram>,
                 std::function<double()>>
        m;
  };
  struct Family {
    Type type;
    std::string help;
    std::map<std::string, Series> series;  // by label key
  };
  std::mutex mu;
  std::map<std::string, Family, std::less<>> families;

  Family& family(std::string_view name, std::string_view help, Type type) {
    auto it = families.find(name);
    if (it == families.end())
      it = families.emplace(std::string(name), Family{type, std::string(help), {}}).first;
    return it->second;
  }
};

Registry::Registry() : impl_(std::make_unique<Impl>()) {}
Registry::~Registry() = default;

Registry& Registry::global() {
  static Registry* r = new Registry();  // never destroyed: metrics may be touched at exit
  return *r;
}

Counter& Registry::counter(std::string_view name, std::string_view help, const Labels& labels) {
  std::lock_guard lock(impl_->mu);
  auto& f = impl_->family(name, help, Impl::Type::counter);
  auto& s = f.series[label_key(labels)];
  if (!std::holds_alternative<std::unique_ptr<Counter>>(s.m) ||
      !std::get<std::unique_ptr<Counter>>(s.m)) {
    s.labels = labels;
    s.m = std::make_unique<Counter>();
  }
  return *std::get<std::unique_ptr<Counter>>(s.m);
}

Gauge& Registry::gauge(std::string_view name, std::string_view help, const Labels& labels) {
  std::lock_guard lock(impl_->mu);
  auto& f = impl_->family(name, help, Impl::Type::gauge);
  auto& s = f.series[label_key(labels)];
  if (!std::holds_alternative<std::unique_ptr<Gauge>>(s.m) ||
      !std::get<std::unique_ptr<Gauge>>(s.m)) {
    s.labels = labels;
    s.m = std::make_unique<Gauge>();
  }
  return *std::get<std::unique_ptr<Gauge>>(s.m);
}

Histogram& Registry::histogram(std::string_view name, std::string_view help,
                               std::vector<double> bounds, const Labels& labels) {
  std::lock_guard lock(impl_->mu);
  auto& f = impl_->family(name, help, Impl::Type::histogram);
  auto& s = f.series[label_key(labels)];
  if (!std::holds_alternative<std::unique_ptr<Histogram>>(s.m) ||
      !std::get<std::unique_ptr<Histogram>>(s.m)) {
    s.labels = labels;
    s.m = std::make_unique<Histogram>(std::move(bounds));
  }
  return *std::get<std::unique_ptr<Histogram>>(s.m);
}

void Registry::gauge_callback(std::string_view name, std::string_view help, const Labels& labels,
                              std::function<double()> fn) {
  add_callback(name, help, labels, std::move(fn), false);
}

void Registry::counter_callback(std::string_view name, std::string_view help, const Labels& labels,
                                std::function<double()> fn) {
  add_callback(name, help, labels, std::move(fn), true);
}

void Registry::add_callback(std::string_view name, std::string_view help, const Labels& labels,
                            std::function<double()> fn, bool counter) {
  std::lock_guard lock(impl_->mu);
  auto& f = impl_->family(name, help, counter ? Impl::Type::counter : Impl::Type::gauge);
  auto& s = f.series[label_key(labels)];
  s.labels = labels;
  s.m = std::move(fn);
}

void Registry::remove_callbacks(const Labels& subset) {
  std::lock_guard lock(impl_->mu);
  for (auto& [name, f] : impl_->families) {
    for (auto it = f.series.begin(); it != f.series.end();) {
      bool match = std::holds_alternative<std::function<double()>>(it->second.m);
      for (const auto& kv : subset) {
        match = match && std::find(it->second.labels.begin(), it->second.labels.end(), kv) !=
                             it->second.labels.end();
      }
      it = match ? f.series.erase(it) : std::next(it);
    }
  }
}

json::object Registry::snapshot() const {
  std::lock_guard lock(impl_->mu);
  json::object out;
  for (const auto& [name, f] : impl_->families) {
    json::object fam;
    fam["type"] = f.type == Impl::Type::counter ? "counter"
                  : f.type == Impl::Type::gauge ? "gauge"
                                                : "histogram";
    fam["help"] = f.help;
    json::array series;
    for (const auto& [key, s] : f.series) {
      json::object o;
      json::object labels;
      for (const auto& [k, v] : s.labels) labels[k] = v;
      o["labels"] = std::move(labels);
      std::visit(
          [&](const auto& m) {
            using T = std::decay_t<decltype(m)>;
            if constexpr (std::is_same_v<T, std::function<double()>>) {
              o["value"] = m ? m() : 0.0;
            } else if constexpr (std::is_same_v<T, std::unique_ptr<Histogram>>) {
              o["count"] = m->count();
              o["sum"] = m->sum();
              json::array buckets;
              auto cum = m->cumulative();
              for (std::size_t i = 0; i < cum.size(); ++i) {
                buckets.push_back(
                    json::object{{"le", i < m->bounds().size() ? json::value(m->bounds()[i])
                                                               : json::value("+Inf")},
                                 {"count", cum[i]}});
              }
              o["buckets"] = std::move(buckets);
              o["p50"] = m->quantile(0.5);
              o["p90"] = m->quantile(0.9);
              o["p99"] = m->quantile(0.99);
            } else {
              o["value"] = m->value();
            }
          },
          s.m);
      series.push_back(std::move(o));
    }
    fam["series"] = std::move(series);
    out[name] = std::move(fam);
  }
  return out;
}

std::string Registry::prometheus() const {
  std::lock_guard lock(impl_->mu);
  std::string out;
  for (const auto& [name, f] : impl_->families) {
    std::string help;
    for (char c : f.help)
      help += c == '\n' ? std::string("\\n") : c == '\\' ? std::string("\\\\") : std::string(1, c);
    out += "# HELP " + name + " " + help + "\n";
    out += "# TYPE " + name + " " +
           (f.type == Impl::Type::counter ? "counter"
            : f.type == Impl::Type::gauge ? "gauge"
                                          : "histogram") +
           "\n";
    for (const auto& [key, s] : f.series) {
      std::visit(
          [&](const auto& m) {
            using T = std::decay_t<decltype(m)>;
            if constexpr (std::is_same_v<T, std::function<double()>>) {
              out += name + label_text(s.labels) + " " + format_number(m ? m() : 0.0) + "\n";
            } else if constexpr (std::is_same_v<T, std::unique_ptr<Histogram>>) {
              auto cum = m->cumulative();
              for (std::size_t i = 0; i < cum.size(); ++i) {
                std::string le = i < m->bounds().size() ? format_number(m->bounds()[i]) : "+Inf";
                out += name + "_bucket" + label_text(s.labels, "le", le) + " " +
                       std::to_string(cum[i]) + "\n";
              }
              out += name + "_sum" + label_text(s.labels) + " " + format_number(m->sum()) + "\n";
              out +=
                  name + "_count" + label_text(s.labels) + " " + std::to_string(m->count()) + "\n";
            } else {
              out += name + label_text(s.labels) + " " + format_number(m->value()) + "\n";
            }
          },
          s.m);
    }
  }
  return out;
}

}  // namespace weir
