// Admission and the generation endpoints of weir serve: POST /v1/completions and
// /v1/chat/completions, streamed (SSE) or not (Service::Impl: service_impl.hpp).
#include "call_stream.hpp"
#include "service_impl.hpp"

namespace weir::serve {

// --- generation -----------------------------------------------------------------------------

std::optional<oa::ApiError> Service::Impl::check_context(const ModelEntry& m,
                                                         std::size_t prompt_len,
                                                         const oa::Sampling& sampling,
                                                         std::int32_t& out_max) {
  const auto ctx = m.max_model_len;
  const auto plen = static_cast<std::int64_t>(prompt_len);
  if (plen >= ctx)
    return oa::ApiError{400,
                        "the prompt has " + std::to_string(plen) +
                            " tokens, but the model's context is " + std::to_string(ctx) +
                            " tokens (prompt plus completion); shorten the prompt",
                        "messages", "context_length_exceeded"};
  const auto& max_tokens = sampling.max_tokens;
  const std::string& key = sampling.max_tokens_key.name;
  if (max_tokens && plen + *max_tokens > ctx)
    return oa::ApiError{400,
                        key + "=" + std::to_string(*max_tokens) + " plus the prompt's " +
                            std::to_string(plen) + " tokens exceeds the model's context of " +
                            std::to_string(ctx) + " tokens; lower " + key + " to at most " +
                            std::to_string(ctx - plen),
                        key, "context_length_exceeded"};
  out_max = static_cast<std::int32_t>(max_tokens ? *max_tokens
                                                 : std::min(cfg.default_max_tokens, ctx - plen));
  return std::nullopt;
}

awaitable<std::variant<std::shared_ptr<Batch>, oa::ApiError>> Service::Impl::admit_and_submit(
    http::Exchange& ex, ModelEntry& m, inf::GenerateRequest rq, int n,
    std::vector<Limiter::Permit>& permits, Clock::time_point deadline) {
  const auto tokens = static_cast<std::int64_t>(rq.prompt.size()) * n;
  auto overloaded = [&](std::string why, Counter* c) {
    c->inc();
    return oa::ApiError{
        429, "model '" + m.spec.name + "' is overloaded: " + why + "; retry after 1 second", "",
        "overloaded"};
  };
  // The n choices run at once: more than the model's running slots could never be admitted.
  if (static_cast<std::size_t>(n) > m.limiter->capacity())
    co_return oa::ApiError{400,
                           "n=" + std::to_string(n) + " choices run at once, but model '" +
                               m.spec.name + "' runs at most " +
                               std::to_string(m.limiter->capacity()) +
                               (m.limiter->capacity() == 1 ? " sequence" : " sequences") +
                               " (--max-num-seqs); ask for fewer choices",
                           "n", ""};
  // Fast path: every permit free now.
  for (int i = 0; i < n; ++i) {
    auto p = m.limiter->try_acquire();
    if (!p) break;
    permits.push_back(std::move(*p));
  }
  if (static_cast<int>(permits.size()) == n) co_return submit_batch(ex, m, std::move(rq), n);
  permits.clear();  // never hold part of them while waiting (see ModelEntry::gather)
  if (m.queued_tokens + tokens > cfg.max_queued_tokens)
    co_return overloaded(std::to_string(m.queued_tokens) + " prompt tokens are queued and " +
                             std::to_string(tokens) + " more would pass --max-queued-tokens=" +
                             std::to_string(cfg.max_queued_tokens),
                         m.rejected_tokens);
  if (m.limiter->waiting() + 1 > m.limiter->max_waiters())
    co_return overloaded(
        std::to_string(m.limiter->in_use()) + " requests running and " +
            std::to_string(m.limiter->waiting()) +
            " queued (--max-queued-requests=" + std::to_string(cfg.max_queued_requests) + ")",
        m.rejected_queue);

  // The wait ends with the permits, or when the client leaves, the request's deadline passes or
  // the server drains: each of the last three emits `gone`. Shared with the timer's handler,
  // which may run after this frame has moved on.
  struct Wait {
    asio::cancellation_signal gone;
    bool timed_out = false;
  };
  auto w = std::make_shared<Wait>();
  asio::steady_timer timer(io, deadline);
  timer.async_wait([w](boost::system::error_code ec) {
    if (ec) return;
    w->timed_out = true;
    w->gone.emit(asio::cancellation_type::terminal);
  });
  ex.on_disconnect([w] { w->gone.emit(asio::cancellation_type::terminal); });
  admission_waits.insert(&w->gone);
  m.queued_tokens += tokens;
  struct Done {
    Service::Impl& s;
    ModelEntry& m;
    http::Exchange& ex;
    asio::steady_timer& timer;
    Wait& w;
    std::int64_t tokens;
    ~Done() {
      m.queued_tokens -= tokens;
      ex.on_disconnect({});
      timer.cancel();
      s.admission_waits.erase(&w.gone);
    }
  } done{*this, m, ex, timer, *w, tokens};
  auto acquire = [&](Limiter& l) -> awaitable<Result<Limiter::Permit>> {
    auto op = asio::co_spawn(io, l.async_acquire(),
                             asio::bind_cancellation_slot(w->gone.slot(), use_awaitable));
    co_return co_await std::move(op);
  };
  // Why the wait ended without its permits: the drain, the deadline or the client.
  auto ended = [&](const Error& e) -> oa::ApiError {
    permits.clear();
    if (e.is(Errc::overloaded)) return overloaded(e.message, m.rejected_queue);
    if (draining) return oa::ApiError{503, "the server is shutting down", "", "shutting_down"};
    if (w->timed_out)
      return oa::ApiError{
          504,
          "the request waited past --request-timeout=" + ms_text(cfg.request_timeout) +
              " for a running slot; retry later or raise the server's limit",
          "", "timeout"};
    return oa::ApiError{499, "the client went away", "", "cancelled"};
  };
  Limiter::Permit gathering;
  if (n > 1) {
    auto g = co_await acquire(*m.gather);
    if (!g) co_return ended(g.error());
    gathering = std::move(*g);
  }
  while (static_cast<int>(permits.size()) < n) {
    auto r = co_await acquire(*m.limiter);
    if (!r) co_return ended(r.error());
    permits.push_back(std::move(*r));
  }
  gathering.release();
  if (ex.disconnected()) co_return ended(Error(Errc::cancelled, ""));
  if (draining) {
    permits.clear();
    co_return oa::ApiError{503, "the server is shutting down", "", "shutting_down"};
  }
  co_return submit_batch(ex, m, std::move(rq), n);
}

// Submits the n choices to the engine (their permits taken) and follows them as one batch.
std::shared_ptr<Batch> Service::Impl::submit_batch(http::Exchange& ex, ModelEntry& m,
                                                   inf::GenerateRequest rq, int n) {
  auto b = std::make_shared<Batch>(io);
  b->engine = &m.engine();
  b->model = &m;
  b->start = Clock::now();
  b->choices.resize(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    inf::GenerateRequest r = rq;
    if (i > 0) r.sampling.seed = rq.sampling.seed + static_cast<std::uint64_t>(i);
    inf::RequestCallbacks cb;
    const auto idx = static_cast<std::size_t>(i);
    std::weak_ptr<Batch> wb = b;
    if (r.logprobs >= 0) {
      cb.on_logprobs = [this, wb, idx](const inf::SampledLogprobs& lp) {
        asio::post(io, [wb, idx, lp] {
          if (auto b = wb.lock()) b->choices[idx].logprobs.push_back(lp);
        });
      };
    }
    cb.on_token = [this, wb, idx](std::int32_t t) {
      asio::post(io, [wb, idx, t] {
        if (auto b = wb.lock()) {
          b->choices[idx].tokens.push_back(t);
          b->wake.cancel();
        }
      });
    };
    // on_done must reach the batch even when the handler has gone: keep it alive until then.
    cb.on_done = [this, b, idx](Result<inf::GenerateResult> res) {
      asio::post(io, [b, idx, res = std::move(res)]() mutable {
        b->choices[idx].done = std::move(res);
        b->wake.cancel();
      });
    };
    b->choices[idx].id = m.engine().submit(std::move(r), std::move(cb));
  }
  active.insert(b.get());
  std::weak_ptr<Batch> wb = b;
  ex.on_disconnect([wb] {
    if (auto b = wb.lock()) {
      b->client_gone = true;
      b->cancel();
    }
  });
  return b;
}

awaitable<void> Service::Impl::wait_events(Batch& b, Clock::time_point deadline) {
  while (!b.has_events()) {
    if (Clock::now() >= deadline && !b.timed_out) {
      b.timed_out = true;
      b.cancel();
    }
    b.wake.expires_at(b.timed_out ? Clock::time_point::max() : deadline);
    co_await b.wake.async_wait(asio::as_tuple(use_awaitable));
  }
}

void Service::Impl::record(const Batch& b, const ChoiceState& c, const inf::GenerateResult& r) {
  (void)c;
  b.model->generation_tokens->inc(static_cast<double>(r.tokens.size()));
  b.model->duration->observe(std::chrono::duration<double>(Clock::now() - b.start).count());
}

// The shared body of both endpoints.
struct GenerationSpec {
  bool chat = true;
  bool tools_active = false;  // parse tool calls from the text (no incremental content)
  std::vector<std::string> tool_names;
  int first_tool_id = 1;
  std::string prefix;  // completions echo
  // tool_choice required / named: the prompt ends with "<tool_call>", which the output lacks.
  std::string forced_prefix;
  bool close_open_call = false;  // a constrained call stops before its closing tag
  // The whole reply is a constrained value (response_format, a forced call): the client's
  // stop sequences do not apply inside it (the engine does not stop there either).
  bool value_only = false;
};

// The text tool calls are parsed from: the forced opening tag put back, an open call closed.
std::string call_text(const GenerationSpec& spec, const std::string& text) {
  std::string t = spec.forced_prefix + text;
  if (spec.close_open_call) {
    const auto open = t.rfind("<tool_call>");
    if (open != std::string::npos && t.find("</tool_call>", open) == std::string::npos)
      t += "</tool_call>";
  }
  return t;
}

// A reply with tools: the content and the calls in it. The client's stop sequences apply to the
// content before the first call, never inside one (the engine stops only in free text).
struct ToolReply {
  std::string content;
  std::vector<oa::ToolCall> calls;
};
ToolReply tool_reply(const GenerationSpec& spec, const std::string& text,
                     const std::vector<std::string>& stops) {
  std::string t = call_text(spec, text);
  const auto open = std::min(t.find("<tool_call>"), t.size());
  StopFilter stop(stops);
  std::string kept = stop.push(std::string_view(t).substr(0, open));
  kept += stop.flush();
  if (kept.size() == open) kept += t.substr(open);  // no stop in the content: the calls stay
  auto parsed = agents::parse_tool_calls(kept, spec.tool_names, spec.first_tool_id);
  ToolReply r;
  r.content = parsed.calls.empty() ? kept : parsed.content;
  for (auto& call : parsed.calls) r.calls.push_back(agents::to_openai(call));
  return r;
}

namespace {

oa::TokenLogprobs to_wire(const inf::SampledLogprobs& lp,
                          const std::function<std::string(std::int32_t)>& text) {
  oa::TokenLogprobs t;
  t.token = text(lp.chosen.token);
  t.logprob = lp.chosen.logprob;
  for (const auto& a : lp.top) t.top.push_back({text(a.token), a.logprob});
  return t;
}

// Per-choice output state of a request.
struct ChoiceOut {
  explicit ChoiceOut(const inf::Tokenizer& t, std::vector<std::string> stops)
      : decoder(t), stop(std::move(stops)) {}
  inf::StreamDecoder decoder;
  StopFilter stop;
  std::string text;                // sent or kept so far (with tools: all of it, parsed at the end)
  std::optional<CallStream> call;  // a forced tool call, streamed as it is generated
  std::vector<std::int32_t> ids;
  std::optional<std::vector<oa::TokenLogprobs>> logprobs;
  std::size_t streamed_bytes = 0;  // of the text sent so far (the echoed prompt included)
  bool finished = false;
};

// One generation request after parsing, from admission to its answer. run() reads top to bottom:
// admit and submit, then (streamed) send each token as an event the moment the handler sees it,
// or (not streamed) collect the text, and answer. Lives in the handler's frame; io thread only.
class Generation {
 public:
  Generation(Service::Impl& s, http::Exchange& ex, ModelEntry& m, const oa::Sampling& sp,
             const GenerationSpec& spec)
      : s_(s), ex_(ex), m_(m), sp_(sp), spec_(spec), n_(sp.n) {}

  awaitable<void> run(inf::GenerateRequest rq, http::Response& out, bool& streamed) {
    const std::size_t prompt_len = rq.prompt.size();
    std::vector<Limiter::Permit> permits;
    auto admitted = co_await s_.admit_and_submit(ex_, m_, std::move(rq), n_, permits, deadline());
    if (auto* e = std::get_if<oa::ApiError>(&admitted)) {
      out = error_response(*e);
      co_return;
    }
    b_ = std::get<std::shared_ptr<Batch>>(std::move(admitted));
    // However the handler ends (an exception, an early return), its engine requests end with it:
    // the engine never steps a sequence nobody will read.
    struct Leave {
      Service::Impl& s;
      Batch* b;
      ~Leave() {
        b->cancel();
        s.active.erase(b);
      }
    } leave{s_, b_.get()};
    m_.prompt_tokens->inc(static_cast<double>(prompt_len));
    outs_.reserve(static_cast<std::size_t>(n_));
    // A constrained value, or a reply with tools, is not cut by the client's stop sequences as
    // it streams (tool_reply applies them to the content before the first call).
    const bool own_stops = !spec_.value_only && !spec_.tools_active;
    for (int i = 0; i < n_; ++i) {
      outs_.emplace_back(m_.tok(), own_stops ? sp_.stop : std::vector<std::string>{});
      if (sp_.stream && !spec_.forced_prefix.empty())
        outs_.back().call.emplace("call_" + std::to_string(spec_.first_tool_id), 0);
    }
    env_ = oa::Envelope{random_id(spec_.chat ? "chatcmpl" : "cmpl"), now_unix(), m_.spec.name};
    usage_.prompt_tokens = static_cast<std::int64_t>(prompt_len);
    if (sp_.stream) {
      streamed = true;
      co_await stream();
    } else {
      co_await collect();
      out = answer();
    }
  }

 private:
  // Streamed: headers and the role, then every token as its own event, written when the
  // handler sees it (what queued meanwhile, on a slow reader, goes out in the same write), then
  // the usage or the error, and [DONE].
  awaitable<void> stream() {
    auto st = co_await ex_.async_start_stream(200, "text/event-stream");
    bool ok = static_cast<bool>(st);
    if (ok && spec_.chat) {  // the role first, as OpenAI does
      std::vector<oa::Choice> first;
      for (int i = 0; i < n_; ++i) first.push_back({i, "", {}, "", std::nullopt});
      std::string role = http::sse_event(oa::chat_chunk(env_, first, true));
      ok = static_cast<bool>(co_await ex_.async_write(std::move(role)));
    }
    if (ok && !spec_.prefix.empty()) {  // echo: the prompt first, as OpenAI does
      std::string echoed;
      for (int i = 0; i < n_; ++i) {
        const std::vector<oa::Choice> one{{i, spec_.prefix, {}, "", std::nullopt}};
        echoed += http::sse_event(oa::completion_chunk(env_, one));
      }
      ok = static_cast<bool>(co_await ex_.async_write(std::move(echoed)));
    }
    if (!ok) b_->cancel();  // the reader is gone or stopped reading
    while (!b_->all_consumed()) {
      co_await s_.wait_events(*b_, deadline());
      std::string events;
      for (int i = 0; i < n_; ++i) {
        for (auto& ch : take(i)) {
          if (ch.text.empty() && ch.tool_calls.empty() && ch.finish_reason.empty() && !ch.logprobs)
            continue;
          const std::vector<oa::Choice> one{std::move(ch)};
          events += http::sse_event(spec_.chat ? oa::chat_chunk(env_, one, false)
                                               : oa::completion_chunk(env_, one));
        }
      }
      if (ok && !events.empty()) {
        ok = static_cast<bool>(co_await ex_.async_write(std::move(events)));
        if (!ok) b_->cancel();
      }
    }
    if (!ok) co_return;
    // Every temporary is a local before its co_await: GCC 12 destroys one built inside the
    // co_await's full-expression twice (docs/architecture.md, "the co_await rule").
    std::string last;
    if (error_status_) {
      const oa::ApiError error{error_status_, error_message_, "",
                               error_status_ == 504 ? "timeout" : ""};
      last = http::sse_event(error.body());
    } else if (sp_.include_usage) {
      last = http::sse_event(spec_.chat ? oa::chat_chunk(env_, {}, false, &usage_)
                                        : oa::completion_chunk(env_, {}, &usage_));
    }
    last += http::sse_event("[DONE]");
    const Status written = co_await ex_.async_write(std::move(last));
    if (written) (void)co_await ex_.async_finish();
  }

  // Not streamed: everything the choices say, until each is done.
  awaitable<void> collect() {
    while (!b_->all_consumed()) {
      co_await s_.wait_events(*b_, deadline());
      for (int i = 0; i < n_; ++i) (void)take(i);
    }
  }

  // The answer of a request that was not streamed.
  http::Response answer() {
    if (error_status_) {
      return error_response(
          {error_status_, error_message_, "", error_status_ == 504 ? "timeout" : ""});
    }
    // 499 only when the client went away: a request cancelled by its deadline or a shutdown,
    // whose engine requests finished anyway, has its answer.
    if (b_->client_gone) return error_response({499, "the client went away", "", "cancelled"});
    std::vector<oa::Choice> choices;
    for (int i = 0; i < n_; ++i) {
      auto& o = outs_[static_cast<std::size_t>(i)];
      const auto& r = **b_->choices[static_cast<std::size_t>(i)].done;
      // A request cut short by a shutdown ends as a stream does: with what it has, "length".
      const std::string finish = finish_name(r.finish);
      oa::Choice ch{
          i, spec_.prefix + o.text, {}, finish == "cancelled" ? "length" : finish, o.logprobs};
      ch.text_offset = spec_.prefix.size();  // the generated tokens start after the echo
      if (spec_.tools_active) add_tool_calls(ch, o.text);
      choices.push_back(std::move(ch));
    }
    return json_response(200, spec_.chat ? oa::chat_completion(env_, choices, usage_)
                                         : oa::completion(env_, choices, usage_));
  }

  // What choice i has produced since the last call, one Choice (a chunk's worth) per token that
  // carries text or logprobs, then its finish when it is done; the text is added to the
  // choice's (for the answer that is not streamed, and for tool calls).
  std::vector<oa::Choice> take(int i) {
    auto& c = b_->choices[static_cast<std::size_t>(i)];
    auto& o = outs_[static_cast<std::size_t>(i)];
    std::vector<oa::Choice> pieces;
    while (!c.tokens.empty()) {
      const auto t = c.tokens.front();
      c.tokens.pop_front();
      observe_latency(c);
      o.ids.push_back(t);
      std::optional<std::vector<oa::TokenLogprobs>> lps;
      if (!c.logprobs.empty()) {
        auto text_of = [&](std::int32_t id) { return s_.token_text(m_, id); };
        lps.emplace(1, to_wire(c.logprobs.front(), text_of));
        c.logprobs.pop_front();
        if (!o.logprobs) o.logprobs.emplace();
        o.logprobs->push_back(lps->front());
      }
      const auto& eog = m_.engine().config().eog_tokens;
      std::string text;  // the end-of-generation token is not text
      if (std::find(eog.begin(), eog.end(), t) == eog.end()) text = o.decoder.push(t);
      oa::Choice piece{i, "", {}, "", std::move(lps)};
      piece.text = visible(o, std::move(text), piece.tool_calls);
      piece.text_offset = spec_.prefix.size() + o.streamed_bytes;
      o.streamed_bytes += piece.text.size();
      pieces.push_back(std::move(piece));
    }
    if (c.done && !o.finished) pieces.push_back(finish(i, c, o));
    return pieces;
  }

  // The end of choice i: the decoder's and the stop filter's rest, its usage, its finish reason
  // (and tool calls), or the request's error.
  oa::Choice finish(int i, ChoiceState& c, ChoiceOut& o) {
    o.finished = true;
    c.consumed = true;
    oa::Choice ch{i, "", {}, "", std::nullopt};
    ch.text = visible(o, o.decoder.flush(), ch.tool_calls);
    ch.text += shown(o, o.stop.flush(), ch.tool_calls);  // no stop sequence came: it is text
    if (!*c.done) {
      error_status_ = 500;
      error_message_ = c.done->error().message;
      return ch;
    }
    const auto& r = **c.done;
    s_.record(*b_, c, r);
    usage_.completion_tokens += static_cast<std::int64_t>(r.tokens.size());
    usage_.cached_tokens = std::max(usage_.cached_tokens, r.usage.cached_prompt_tokens);
    if (r.usage.cached_prompt_tokens > 0 && i == 0)
      m_.cached_tokens->inc(static_cast<double>(r.usage.cached_prompt_tokens));
    if (r.finish == inf::FinishReason::cancelled && b_->timed_out) {
      error_status_ = 504;
      error_message_ = "the request ran past --request-timeout=" + ms_text(s_.cfg.request_timeout) +
                       " after " + std::to_string(r.tokens.size()) +
                       " tokens; ask for fewer tokens (max_tokens) or raise the server's limit";
    }
    const std::string name = finish_name(r.finish);
    ch.finish_reason = name == "cancelled" ? "length" : name;
    if (o.call) {  // a forced call, streamed already
      if (o.call->complete()) ch.finish_reason = "tool_calls";
    } else if (spec_.tools_active) {
      add_tool_calls(ch, o.text);
    }
    return ch;
  }

  // A piece of decoded text as the client may see it now: valid UTF-8 (a model can emit any
  // bytes), without what could still be a stop sequence (shown()).
  std::string visible(ChoiceOut& o, std::string decoded, std::vector<oa::ToolCall>& calls) {
    return shown(o, o.stop.push(agents::to_valid_utf8(decoded)), calls);
  }

  // Text past the stop filter: kept in the choice's text, and a forced call's deltas it
  // completes added to `calls`; a choice whose tool calls are parsed at its end shows nothing
  // before.
  std::string shown(ChoiceOut& o, std::string text, std::vector<oa::ToolCall>& calls) {
    o.text += text;
    if (o.call)
      for (auto& delta : o.call->push(text)) calls.push_back(std::move(delta));
    if (spec_.tools_active) text.clear();
    return text;
  }

  // The tool calls in a finished choice's text (the text before them becomes its content; the
  // client's stop sequences apply to that content only).
  void add_tool_calls(oa::Choice& ch, const std::string& text) const {
    ToolReply reply = tool_reply(spec_, text, sp_.stop);
    ch.text = std::move(reply.content);
    ch.tool_calls = std::move(reply.calls);
    if (!ch.tool_calls.empty()) ch.finish_reason = "tool_calls";
  }

  void observe_latency(ChoiceState& c) {
    const auto now = Clock::now();
    if (!c.last_token)
      m_.ttft->observe(std::chrono::duration<double>(now - arrival_).count());
    else
      m_.itl->observe(std::chrono::duration<double>(now - *c.last_token).count());
    c.last_token = now;
  }

  Clock::time_point deadline() const { return arrival_ + s_.cfg.request_timeout; }

  Service::Impl& s_;
  http::Exchange& ex_;
  ModelEntry& m_;
  const oa::Sampling& sp_;
  const GenerationSpec& spec_;
  const int n_;
  const Clock::time_point arrival_ = Clock::now();
  std::shared_ptr<Batch> b_;
  std::vector<ChoiceOut> outs_;
  oa::Envelope env_;
  oa::Usage usage_;
  int error_status_ = 0;  // the request's error, once a choice ends in one
  std::string error_message_;
};

}  // namespace

namespace {

inf::GenerateRequest base_request(const oa::Sampling& sp) {
  inf::GenerateRequest rq;
  rq.sampling.temperature = sp.temperature;
  rq.sampling.top_p = sp.top_p;
  rq.sampling.seed =
      sp.seed.value_or(static_cast<std::uint64_t>(Clock::now().time_since_epoch().count()));
  rq.sampling.presence_penalty = sp.presence_penalty;
  rq.sampling.frequency_penalty = sp.frequency_penalty;
  // vLLM's and llama.cpp's extensions, which weir's sampler has too.
  if (sp.top_k) rq.sampling.top_k = *sp.top_k;
  if (sp.min_p) rq.sampling.min_p = *sp.min_p;
  if (sp.repetition_penalty) rq.sampling.repetition_penalty = *sp.repetition_penalty;
  rq.stop_strings = sp.stop;
  rq.logprobs = sp.logprobs;
  return rq;
}

}  // namespace

awaitable<void> Service::Impl::chat(http::Exchange& ex, http::Response& out, bool& streamed) {
  oa::ChatRequest cr;
  oa::Limits lim;
  lim.max_n = cfg.max_n;
  if (auto e = oa::parse_chat_request(ex.request().body, cr, lim)) {
    out = error_response(*e);
    co_return;
  }
  std::optional<oa::ApiError> err;
  ModelEntry* m = find_model(cr.model, err);
  if (!m) {
    out = error_response(*err);
    co_return;
  }
  inf::GenerateRequest rq = base_request(cr.sampling);
  if (auto e = make_constraint(cr, m->tok(), rq)) {
    out = error_response(*e);
    co_return;
  }
  GenerationSpec spec;
  spec.chat = true;
  spec.value_only = rq.constraint != nullptr;  // response_format
  std::vector<agents::Message> msgs;
  for (const auto& cm : cr.messages) {
    // (The codec refused calls whose arguments are not a JSON object: none is left out here.)
    agents::Message am = agents::from_openai(cm);
    spec.first_tool_id += static_cast<int>(am.tool_calls.size());
    if (am.role == agents::Role::tool && am.name.empty()) {  // name the tool from its call
      for (const auto& prev : msgs)
        for (const auto& c : prev.tool_calls)
          if (c.id == am.tool_call_id) am.name = c.name;
    }
    msgs.push_back(std::move(am));
  }
  std::vector<agents::ToolSpec> tools;
  if (cr.tool_choice != oa::ToolChoice::none) {
    for (const auto& t : cr.tools) {
      tools.push_back({t.name, t.description, t.parameters});
      spec.tool_names.push_back(t.name);
    }
  }
  spec.tools_active = !tools.empty();
  std::string_view reply_prefix;  // weir's markup the reply starts with (a forced call)
  if (spec.tools_active) {
    rq.stop_strings.push_back("</tool_call>");
    // A tool call is valid by construction: {"name": one of the tools, "arguments": its
    // parameters}. With tool_choice auto, after the model opens "<tool_call>"; with required or
    // a named function, the prompt opens it and the reply is the call (of that function).
    const bool forced =
        cr.tool_choice == oa::ToolChoice::required || cr.tool_choice == oa::ToolChoice::named;
    std::vector<agents::ToolSpec> allowed;
    for (const auto& t : tools)
      if (cr.tool_choice != oa::ToolChoice::named || t.name == cr.tool_choice_name)
        allowed.push_back(t);
    if (!rq.constraint) {  // a response_format constraint leaves tool calls to the parser
      if (auto c = m->chat->tool_call_constraint(allowed)) {
        rq.constraint = *c;
        if (!forced) rq.constraint_trigger = "<tool_call>";
        spec.close_open_call = true;
      } else if (forced) {
        out = error_response({400,
                              tool_choice_text(cr) + " cannot be enforced: " + c.error().message +
                                  "; use tool_choice 'auto'",
                              "tool_choice", "invalid_schema"});
        co_return;
      } else {
        weir::log(LogLevel::warn, "tool calls are not constrained: " + c.error().message);
      }
    }
    if (forced) {
      reply_prefix = "<tool_call>";
      spec.forced_prefix = "<tool_call>";
      spec.value_only = rq.constraint != nullptr;
    }
  }
  // The template's markers are special tokens; what the messages hold is text (never EOS or a
  // turn marker), as /v1/completions reads its prompt.
  rq.prompt = m->chat->encode_prompt(msgs, tools, reply_prefix);
  std::int32_t max_new = 0;
  if (auto e = check_context(*m, rq.prompt.size(), cr.sampling, max_new)) {
    out = error_response(*e);
    co_return;
  }
  rq.max_new_tokens = max_new;
  // A value that must start at once has to fit the reply (the engine would refuse it too).
  const ReplyBudget budget{max_new, cr.sampling.max_tokens,
                           static_cast<std::int64_t>(rq.prompt.size()), m->max_model_len,
                           cr.sampling.max_tokens_key.name};
  const bool forced_call = !spec.forced_prefix.empty();
  if (auto e = check_budget(rq, budget,
                            forced_call ? tool_choice_text(cr)
                            : cr.response_format == oa::ResponseFormat::json_object
                                ? "the response_format's JSON"
                                : "the response_format's schema",
                            forced_call ? "call" : "value")) {
    out = error_response(*e);
    co_return;
  }
  // The stop filter trims the user's stop sequences; a tool call keeps its closing tag.
  Generation generation(*this, ex, *m, cr.sampling, spec);
  co_await generation.run(std::move(rq), out, streamed);
}

awaitable<void> Service::Impl::completions(http::Exchange& ex, http::Response& out,
                                           bool& streamed) {
  oa::CompletionRequest cr;
  oa::Limits lim;
  lim.max_n = cfg.max_n;
  if (auto e = oa::parse_completion_request(ex.request().body, cr, lim)) {
    out = error_response(*e);
    co_return;
  }
  std::optional<oa::ApiError> err;
  ModelEntry* m = find_model(cr.model, err);
  if (!m) {
    out = error_response(*err);
    co_return;
  }
  inf::GenerateRequest rq = base_request(cr.sampling);
  GenerationSpec spec;
  spec.chat = false;
  if (cr.prompt_is_tokens) {
    for (auto t : cr.prompt_tokens) {
      if (t < 0 || t >= m->tok().n_vocab()) {
        out = error_response({400,
                              "prompt token id " + std::to_string(t) +
                                  " is not in this model's vocabulary (0.." +
                                  std::to_string(m->tok().n_vocab() - 1) + ")",
                              "prompt", ""});
        co_return;
      }
    }
    rq.prompt = cr.prompt_tokens;
    if (cr.echo) spec.prefix = agents::to_valid_utf8(m->tok().decode(rq.prompt));
  } else {
    rq.prompt = m->tok().encode(cr.prompt, true, false);  // client text is text
    if (cr.echo) spec.prefix = cr.prompt;
  }
  std::int32_t max_new = 0;
  if (auto e = check_context(*m, rq.prompt.size(), cr.sampling, max_new)) {
    e->param = e->param == "messages" ? "prompt" : e->param;
    out = error_response(*e);
    co_return;
  }
  rq.max_new_tokens = max_new;
  Generation generation(*this, ex, *m, cr.sampling, spec);
  co_await generation.run(std::move(rq), out, streamed);
}

// --- lifecycle ------------------------------------------------------------------------------

}  // namespace weir::serve
