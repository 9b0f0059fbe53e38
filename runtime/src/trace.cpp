// Spans and the Tracer: a bounded queue of finished spans and one export thread.
#include "weir/runtime/trace.hpp"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "weir/runtime/log.hpp"
#include "weir/runtime/metrics.hpp"
#include "weir/runtime/text.hpp"

namespace weir::trace {

using Clock = std::chrono::steady_clock;

namespace {

std::int64_t unix_ns_now() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// `s` cut to at most `n` bytes on a UTF-8 character boundary.
std::string_view cut_utf8(std::string_view s, std::size_t n) {
  return s.substr(0, utf8_cut(s, n));
}

}  // namespace

// --- Span -----------------------------------------------------------------------------------

Span& Span::operator=(Span&& o) noexcept {
  if (this != &o) {
    end();
    tracer_ = o.tracer_;
    data_ = std::move(o.data_);
  }
  return *this;
}

SpanContext Span::context() const {
  if (!data_) return {};
  SpanContext c;
  c.trace_id = data_->trace_id;
  c.span_id = data_->span_id;
  c.flags = data_->flags;
  c.trace_state = data_->trace_state;
  return c;
}

bool Span::capture_content() const noexcept {
  return data_ && tracer_->options().capture_content;
}

void Span::put(std::string_view key, AttributeValue v) {
  if (auto* s = std::get_if<std::string>(&v)) {
    const std::size_t cap = tracer_->options().max_attribute_bytes;
    if (s->size() > cap) s->resize(cut_utf8(*s, cap).size());
  }
  for (auto& a : data_->attributes) {
    if (a.key == key) {
      a.value = std::move(v);
      return;
    }
  }
  if (data_->attributes.size() >= tracer_->options().max_attributes) {
    ++data_->dropped_attributes;
    return;
  }
  data_->attributes.push_back({std::string(key), std::move(v)});
}

void Span::set(std::string_view key, std::string_view v) {
  if (data_) put(key, std::string(v));
}
void Span::set(std::string_view key, bool v) {
  if (data_) put(key, v);
}
void Span::set(std::string_view key, double v) {
  if (data_) put(key, v);
}
void Span::set_int(std::string_view key, std::int64_t v) {
  if (data_) put(key, v);
}
void Span::set(std::string_view key, std::vector<std::string> v) {
  if (data_) put(key, std::move(v));
}

void Span::set_content(std::string_view key, std::string_view text) {
  if (!capture_content()) return;
  const auto& o = tracer_->options();
  if (text.size() <= std::min(o.max_content_bytes, o.max_attribute_bytes)) {
    put(key, std::string(text));
    return;
  }
  // max_content_bytes of the text, fewer where the text and its marker would not fit in an
  // attribute (put() would cut the marker off: a 4 KiB cap on both lost it).
  const std::size_t marker =
      std::string_view("... [ bytes cut]").size() + std::to_string(text.size()).size();
  const std::size_t room = o.max_attribute_bytes > marker ? o.max_attribute_bytes - marker : 0;
  const std::string_view head = cut_utf8(text, std::min(o.max_content_bytes, room));
  put(key, std::string(head) + "... [" + std::to_string(text.size() - head.size()) + " bytes cut]");
}

void Span::add_event(std::string_view name, std::vector<Attribute> attributes) {
  if (!data_) return;
  if (data_->events.size() >= tracer_->options().max_events) {
    ++data_->dropped_events;
    return;
  }
  data_->events.push_back({std::string(name), unix_ns_now(), std::move(attributes)});
}

void Span::set_error(std::string_view type, std::string_view message) {
  if (!data_) return;
  data_->status = StatusCode::error;
  data_->status_message = std::string(cut_utf8(message, tracer_->options().max_attribute_bytes));
  put(attr::kErrorType, std::string(type));
}

void Span::set_error(const Error& e) {
  if (data_) set_error(errc_name(e.code), e.message);
}

void Span::set_ok() {
  if (data_ && data_->status == StatusCode::unset) data_->status = StatusCode::ok;
}

void Span::end() {
  if (!data_) return;
  data_->end_unix_ns = std::max(unix_ns_now(), data_->start_unix_ns);
  tracer_->submit(std::move(data_));
}

// --- Tracer ---------------------------------------------------------------------------------

struct Tracer::Impl {
  TracerOptions options;
  std::vector<std::unique_ptr<SpanExporter>> exporters;
  Counter* exported_total = nullptr;
  Counter* dropped_full = nullptr;
  Counter* dropped_failed = nullptr;
  Counter* dropped_shutdown = nullptr;
  Counter* failures_total = nullptr;
  Gauge* queued_gauge = nullptr;

  std::mutex mu;
  std::condition_variable wake;                 // the export thread: a batch is full, a flush, stop
  std::condition_variable done;                 // flush(): spans were processed
  std::deque<std::unique_ptr<SpanData>> queue;  // GUARDED_BY(mu)
  std::uint64_t accepted = 0;                   // GUARDED_BY(mu): spans ever queued
  std::uint64_t processed = 0;                  // GUARDED_BY(mu): taken and exported (or failed)
  std::uint64_t flush_target = 0;               // GUARDED_BY(mu): export at once up to this
  bool stopping = false;                        // GUARDED_BY(mu)
  bool stopped = false;                         // GUARDED_BY(mu): no more spans accepted
  Clock::time_point hard_deadline = Clock::time_point::max();  // GUARDED_BY(mu): shutdown's

  std::atomic<std::uint64_t> n_exported{0}, n_dropped{0}, n_failures{0};
  std::thread worker;

  void drop(std::uint64_t n, Counter* reason) {
    n_dropped += n;
    reason->inc(static_cast<double>(n));
  }

  // The export in progress, if any: shutdown() moves its deadline to its own.
  ExportDeadline* current = nullptr;  // GUARDED_BY(mu)

  void export_batch(std::vector<std::unique_ptr<SpanData>>& batch, const ExportDeadline& deadline) {
    std::vector<SpanData> spans;
    spans.reserve(batch.size());
    for (auto& s : batch) spans.push_back(std::move(*s));
    batch.clear();
    const std::string body = encode_otlp_json(spans, options);
    bool ok = true;
    for (auto& e : exporters) {
      Status st = e->export_json(body, spans.size(), deadline);
      if (!st) {
        ok = false;
        n_failures += 1;
        failures_total->inc();
        log(LogLevel::warn, "trace export to " + e->describe() + " failed (" +
                                std::to_string(spans.size()) +
                                " spans dropped): " + st.error().message);
      }
    }
    // A batch counts as exported when every exporter took it; otherwise its spans are dropped.
    if (ok) {
      n_exported += spans.size();
      exported_total->inc(static_cast<double>(spans.size()));
    } else {
      drop(spans.size(), dropped_failed);
    }
  }

  void run() {
    std::unique_lock lk(mu);
    for (;;) {
      wake.wait_for(lk, options.schedule_delay, [&] {
        return stopping || queue.size() >= options.max_batch_spans || flush_target > processed;
      });
      if (queue.empty()) {
        done.notify_all();
        if (stopping) return;
        continue;
      }
      std::vector<std::unique_ptr<SpanData>> batch;
      const std::size_t n = std::min(queue.size(), options.max_batch_spans);
      batch.reserve(n);
      for (std::size_t i = 0; i < n; ++i) {
        batch.push_back(std::move(queue.front()));
        queue.pop_front();
      }
      queued_gauge->set(static_cast<double>(queue.size()));
      ExportDeadline deadline(std::min(hard_deadline, Clock::now() + options.export_timeout));
      current = &deadline;
      lk.unlock();
      export_batch(batch, deadline);
      lk.lock();
      current = nullptr;
      processed += n;
      done.notify_all();
    }
  }
};

Tracer::Tracer(TracerOptions options, std::vector<std::unique_ptr<SpanExporter>> exporters)
    : impl_(std::make_unique<Impl>()) {
  auto& i = *impl_;
  i.options = std::move(options);
  i.options.max_batch_spans = std::max<std::size_t>(1, i.options.max_batch_spans);
  i.exporters = std::move(exporters);
  Registry& reg = i.options.metrics ? *i.options.metrics : Registry::global();
  i.exported_total =
      &reg.counter("weir_trace_spans_exported_total", "Spans sent to every trace exporter");
  constexpr std::string_view kDropped =
      "Spans not exported: the export queue was full (never blocks a run), an export failed, or "
      "they ended after shutdown";
  i.dropped_full =
      &reg.counter("weir_trace_spans_dropped_total", kDropped, {{"reason", "queue_full"}});
  i.dropped_failed =
      &reg.counter("weir_trace_spans_dropped_total", kDropped, {{"reason", "export_failed"}});
  i.dropped_shutdown =
      &reg.counter("weir_trace_spans_dropped_total", kDropped, {{"reason", "shutdown"}});
  i.failures_total = &reg.counter("weir_trace_export_failures_total",
                                  "Trace batches an exporter failed to deliver (after retries)");
  i.queued_gauge = &reg.gauge("weir_trace_queue_spans", "Finished spans waiting for export");
  i.worker = std::thread([&i] { i.run(); });
}

Tracer::~Tracer() {
  shutdown(std::chrono::seconds(5));
}

const TracerOptions& Tracer::options() const {
  return impl_->options;
}

std::string Tracer::describe() const {
  std::string s;
  for (const auto& e : impl_->exporters) s += (s.empty() ? "" : ", ") + e->describe();
  return s;
}

std::uint64_t Tracer::spans_exported() const {
  return impl_->n_exported.load();
}
std::uint64_t Tracer::spans_dropped() const {
  return impl_->n_dropped.load();
}
std::uint64_t Tracer::export_failures() const {
  return impl_->n_failures.load();
}

Span Tracer::start_span(std::string name, const SpanContext* parent, SpanKind kind) {
  if (parent && parent->valid() && !parent->sampled()) return Span();
  Span s;
  s.tracer_ = this;
  s.data_ = std::make_unique<SpanData>();
  SpanData& d = *s.data_;
  if (parent && parent->valid()) {
    d.trace_id = parent->trace_id;
    d.parent_span_id = parent->span_id;
    d.trace_state = parent->trace_state;
  } else {
    d.trace_id = random_trace_id();
  }
  d.span_id = random_span_id();
  d.flags = 1;
  d.name = std::move(name);
  d.kind = kind;
  d.start_unix_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                        std::chrono::system_clock::now().time_since_epoch())
                        .count();
  return s;
}

void Tracer::submit(std::unique_ptr<SpanData> span) {
  auto& i = *impl_;
  std::unique_lock lk(i.mu);
  if (i.stopped) {
    lk.unlock();
    i.drop(1, i.dropped_shutdown);
    return;
  }
  if (i.queue.size() >= i.options.max_queue_spans) {
    lk.unlock();
    i.drop(1, i.dropped_full);  // the span is freed here, outside the lock
    return;
  }
  i.queue.push_back(std::move(span));
  ++i.accepted;
  i.queued_gauge->set(static_cast<double>(i.queue.size()));
  const bool full = i.queue.size() >= i.options.max_batch_spans;
  lk.unlock();
  if (full) i.wake.notify_one();
}

Status Tracer::flush(std::chrono::milliseconds timeout) {
  auto& i = *impl_;
  std::unique_lock lk(i.mu);
  const std::uint64_t target = i.accepted;
  i.flush_target = std::max(i.flush_target, target);
  i.wake.notify_one();
  if (!i.done.wait_for(lk, timeout, [&] { return i.processed >= target || i.stopping; }))
    return Error(Errc::deadline_exceeded, "trace flush: " + std::to_string(target - i.processed) +
                                              " spans not exported after " +
                                              std::to_string(timeout.count()) + " ms");
  return {};
}

void Tracer::shutdown(std::chrono::milliseconds timeout) {
  auto& i = *impl_;
  {
    std::lock_guard lk(i.mu);
    if (i.stopped) return;
    i.hard_deadline = Clock::now() + timeout;
    if (i.current && i.current->get() > i.hard_deadline) i.current->set(i.hard_deadline);
  }
  (void)flush(timeout);
  std::deque<std::unique_ptr<SpanData>> left;
  {
    std::lock_guard lk(i.mu);
    i.stopped = true;
    i.stopping = true;
    left.swap(i.queue);
  }
  i.wake.notify_one();
  if (i.worker.joinable()) i.worker.join();
  if (!left.empty()) i.drop(left.size(), i.dropped_shutdown);
  i.queued_gauge->set(0);
}

Span start_tool_span(const Context& ctx, const std::string& name, std::string_view arguments,
                     std::string_view call_id) {
  Span span = ctx.start("execute_tool " + name);
  if (!span) return span;
  span.set(attr::kOperation, "execute_tool");
  span.set(attr::kToolName, name);
  span.set("gen_ai.tool.type", "function");
  if (!call_id.empty()) span.set(attr::kToolCallId, call_id);
  span.set("weir.tool.arguments_bytes", arguments.size());
  span.set_content("gen_ai.tool.call.arguments", arguments);
  return span;
}

void set_tool_output(Span& span, std::size_t output_bytes, std::string_view output,
                     const std::optional<std::string>& artifact_id) {
  if (!span) return;
  span.set("weir.tool.output_bytes", output_bytes);
  span.set("weir.tool.spilled", artifact_id.has_value());
  if (artifact_id) span.set("weir.tool.artifact_id", *artifact_id);
  span.set_content("gen_ai.tool.call.result", output);
  span.set_ok();
}

}  // namespace weir::trace
