// Admission and the generation endpoints of weir serve: POST /v1/completions and
// /v1/chat/completions, streamed (SSE) or not (Service::Impl: service_impl.hpp).
#include "service_impl.hpp"

namespace weir::serve {

// --- generation -----------------------------------------------------------------------------

std::optional<oa::ApiError> Service::Impl::check_context(const ModelEntry& m,
                                                         std::size_t prompt_len,
                                                         std::optional<std::int64_t> max_tokens,
                                                         std::int32_t& out_max) {
  const auto ctx = m.max_model_len;
  const auto plen = static_cast<std::int64_t>(prompt_len);
  if (plen >= ctx)
    return oa::ApiError{400,
                        "the prompt has " + std::to_string(plen) +
                            " tokens, but the model's context is " + std::to_string(ctx) +
                            " tokens (prompt plus completion); shorten the prompt",
                        "messages", "context_length_exceeded"};
  if (max_tokens && plen + *max_tokens > ctx)
    return oa::ApiError{400,
                        "max_tokens=" + std::to_string(*max_tokens) + " plus the prompt's " +
                            std::to_string(plen) + " tokens exceeds the model's context of " +
                            std::to_string(ctx) + " tokens; lower max_tokens to at most " +
                            std::to_string(ctx - plen),
                        "max_tokens", "context_length_exceeded"};
  out_max = static_cast<std::int32_t>(max_tokens ? *max_tokens
                                                 : std::min(cfg.default_max_tokens, ctx - plen));
  return std::nullopt;
}

awaitable<std::variant<std::shared_ptr<Batch>, oa::ApiError>> Service::Impl::admit_and_submit(
    http::Exchange& ex, ModelEntry& m, inf::GenerateRequest rq, int n,
    std::vector<Limiter::Permit>& permits) {
  const auto tokens = static_cast<std::int64_t>(rq.prompt.size()) * n;
  auto overloaded = [&](std::string why, Counter* c) {
    c->inc();
    return oa::ApiError{
        429, "model '" + m.spec.name + "' is overloaded: " + why + "; retry after 1 second", "",
        "overloaded"};
  };
  // Fast path: every permit free now.
  for (int i = 0; i < n; ++i) {
    auto p = m.limiter->try_acquire();
    if (!p) break;
    permits.push_back(std::move(*p));
  }
  if (static_cast<int>(permits.size()) < n) {
    if (m.queued_tokens + tokens > cfg.max_queued_tokens) {
      permits.clear();
      co_return overloaded(std::to_string(m.queued_tokens) + " prompt tokens are queued and " +
                               std::to_string(tokens) + " more would pass --max-queued-tokens=" +
                               std::to_string(cfg.max_queued_tokens),
                           m.rejected_tokens);
    }
    if (m.limiter->waiting() + 1 > m.limiter->max_waiters()) {
      permits.clear();
      co_return overloaded(
          std::to_string(m.limiter->in_use()) + " requests running and " +
              std::to_string(m.limiter->waiting()) +
              " queued (--max-queued-requests=" + std::to_string(cfg.max_queued_requests) + ")",
          m.rejected_queue);
    }
    m.queued_tokens += tokens;
    asio::cancellation_signal gone;
    ex.on_disconnect([&gone] { gone.emit(asio::cancellation_type::terminal); });
    while (static_cast<int>(permits.size()) < n) {
      auto r = co_await asio::co_spawn(io, m.limiter->async_acquire(),
                                       asio::bind_cancellation_slot(gone.slot(), use_awaitable));
      if (!r) {
        m.queued_tokens -= tokens;
        ex.on_disconnect({});
        permits.clear();
        if (r.error().is(Errc::overloaded))
          co_return overloaded(r.error().message, m.rejected_queue);
        co_return oa::ApiError{499, "the client went away", "", "cancelled"};
      }
      permits.push_back(std::move(*r));
    }
    m.queued_tokens -= tokens;
    ex.on_disconnect({});
    if (ex.disconnected()) {
      permits.clear();
      co_return oa::ApiError{499, "the client went away", "", "cancelled"};
    }
    if (draining) {
      permits.clear();
      co_return oa::ApiError{503, "the server is shutting down", "", "shutting_down"};
    }
  }
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
    if (auto b = wb.lock()) b->cancel();
  });
  co_return b;
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

namespace {

// Per-choice output state of a request.
struct ChoiceOut {
  explicit ChoiceOut(const inf::Tokenizer& t, std::vector<std::string> stops)
      : decoder(t), stop(std::move(stops)) {}
  inf::StreamDecoder decoder;
  StopFilter stop;
  std::string text;  // sent or kept so far
  std::vector<std::int32_t> ids;
  std::optional<std::vector<oa::TokenLogprobs>> logprobs;
  bool finished = false;
};

}  // namespace

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

namespace {

oa::TokenLogprobs to_wire(const inf::SampledLogprobs& lp,
                          const std::function<std::string(std::int32_t)>& text) {
  oa::TokenLogprobs t;
  t.token = text(lp.chosen.token);
  t.logprob = lp.chosen.logprob;
  for (const auto& a : lp.top) t.top.push_back({text(a.token), a.logprob});
  return t;
}

}  // namespace

awaitable<void> run_generation(Service::Impl& s, http::Exchange& ex, ModelEntry& m,
                               inf::GenerateRequest rq, const oa::Sampling& sp,
                               const GenerationSpec& spec, http::Response& out, bool& streamed) {
  const auto arrival = Clock::now();
  const int n = sp.n;
  const std::size_t prompt_len = rq.prompt.size();
  std::vector<Limiter::Permit> permits;
  auto admitted = co_await s.admit_and_submit(ex, m, std::move(rq), n, permits);
  if (auto* e = std::get_if<oa::ApiError>(&admitted)) {
    out = error_response(*e);
    co_return;
  }
  auto b = std::get<std::shared_ptr<Batch>>(std::move(admitted));
  // However the handler ends (an exception, an early return), its engine requests end with it:
  // the engine never steps a sequence nobody will read.
  struct Leave {
    Service::Impl& s;
    Batch* b;
    ~Leave() {
      b->cancel();
      s.active.erase(b);
    }
  } leave{s, b.get()};
  m.prompt_tokens->inc(static_cast<double>(prompt_len));
  const auto deadline = arrival + s.cfg.request_timeout;
  auto text_of = [&](std::int32_t id) { return s.token_text(m, id); };

  std::vector<ChoiceOut> outs;
  outs.reserve(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) outs.emplace_back(m.tok(), sp.stop);
  oa::Envelope env{random_id(spec.chat ? "chatcmpl" : "cmpl"), now_unix(), m.spec.name};
  oa::Usage usage;
  usage.prompt_tokens = static_cast<std::int64_t>(prompt_len);
  bool stream_ok = true;
  if (sp.stream) {
    streamed = true;
    auto st = co_await ex.async_start_stream(200, "text/event-stream");
    stream_ok = static_cast<bool>(st);
    if (!stream_ok) b->cancel();
    if (stream_ok && spec.chat) {  // the role first, as OpenAI does
      std::vector<oa::Choice> first;
      for (int i = 0; i < n; ++i) first.push_back({i, "", {}, "", std::nullopt});
      stream_ok = static_cast<bool>(
          co_await ex.async_write(http::sse_event(oa::chat_chunk(env, first, true))));
    }
  }
  std::string error_message;
  int error_status = 0;
  while (!b->all_consumed()) {
    co_await s.wait_events(*b, deadline);
    std::vector<oa::Choice> chunk;
    for (int i = 0; i < n; ++i) {
      auto& c = b->choices[static_cast<std::size_t>(i)];
      auto& o = outs[static_cast<std::size_t>(i)];
      std::string delta;
      std::optional<std::vector<oa::TokenLogprobs>> lps;
      while (!c.tokens.empty()) {
        const auto t = c.tokens.front();
        c.tokens.pop_front();
        const auto now = Clock::now();
        if (!c.last_token)
          m.ttft->observe(std::chrono::duration<double>(now - arrival).count());
        else
          m.itl->observe(std::chrono::duration<double>(now - *c.last_token).count());
        c.last_token = now;
        o.ids.push_back(t);
        if (!c.logprobs.empty()) {
          if (!lps) lps.emplace();
          lps->push_back(to_wire(c.logprobs.front(), text_of));
          c.logprobs.pop_front();
        }
        if (std::find(m.engine().config().eog_tokens.begin(), m.engine().config().eog_tokens.end(),
                      t) != m.engine().config().eog_tokens.end())
          continue;  // the end-of-generation token is not text
        delta += o.decoder.push(t);
      }
      std::string finish;
      if (c.done && !o.finished) {
        o.finished = true;
        c.consumed = true;
        delta += o.decoder.flush();
        if (!*c.done) {
          error_status = 500;
          error_message = c.done->error().message;
        } else {
          const auto& r = **c.done;
          s.record(*b, c, r);
          usage.completion_tokens += static_cast<std::int64_t>(r.tokens.size());
          usage.cached_tokens = std::max(usage.cached_tokens, r.usage.cached_prompt_tokens);
          if (r.usage.cached_prompt_tokens > 0 && i == 0)
            m.cached_tokens->inc(static_cast<double>(r.usage.cached_prompt_tokens));
          finish = finish_name(r.finish);
          if (r.finish == inf::FinishReason::cancelled && b->timed_out) {
            error_status = 504;
            error_message =
                "the request ran past --request-timeout=" + ms_text(s.cfg.request_timeout) +
                " after " + std::to_string(r.tokens.size()) +
                " tokens; ask for fewer "
                "tokens (max_tokens) or raise the server's limit";
          }
        }
      }
      // A model can emit any bytes: clients get valid UTF-8 (U+FFFD for what is not).
      delta = agents::to_valid_utf8(delta);
      std::string visible = o.stop.push(delta);
      if (o.finished) visible += o.stop.flush();
      if (spec.tools_active) {
        o.text += visible;
        visible.clear();
      } else {
        o.text += visible;
      }
      if (lps) {
        if (!o.logprobs) o.logprobs.emplace();
        o.logprobs->insert(o.logprobs->end(), lps->begin(), lps->end());
      }
      if (!sp.stream) continue;
      oa::Choice ch{i, visible, {}, "", lps};
      if (o.finished && !finish.empty()) {
        if (spec.tools_active) {
          auto parsed = agents::parse_tool_calls(call_text(spec, o.text), spec.tool_names,
                                                 spec.first_tool_id);
          ch.text = parsed.calls.empty() ? o.text : parsed.content;
          for (auto& call : parsed.calls) ch.tool_calls.push_back(agents::to_openai(call));
          if (!parsed.calls.empty()) finish = "tool_calls";
        }
        ch.finish_reason = finish == "cancelled" ? "length" : finish;
      }
      if (ch.text.empty() && ch.tool_calls.empty() && ch.finish_reason.empty() && !ch.logprobs)
        continue;
      chunk.push_back(std::move(ch));
    }
    if (sp.stream && stream_ok && !chunk.empty()) {
      std::string body =
          spec.chat ? oa::chat_chunk(env, chunk, false) : oa::completion_chunk(env, chunk);
      stream_ok = static_cast<bool>(co_await ex.async_write(http::sse_event(body)));
      if (!stream_ok) b->cancel();  // the reader is gone or stopped reading
    }
  }
  if (sp.stream) {
    if (!stream_ok) co_return;
    if (error_status) {
      (void)co_await ex.async_write(http::sse_event(
          oa::ApiError{error_status, error_message, "", error_status == 504 ? "timeout" : ""}
              .body()));
    } else if (sp.include_usage) {
      std::string body = spec.chat ? oa::chat_chunk(env, {}, false, &usage)
                                   : oa::completion_chunk(env, {}, &usage);
      (void)co_await ex.async_write(http::sse_event(body));
    }
    if (co_await ex.async_write(http::sse_event("[DONE]"))) (void)co_await ex.async_finish();
    co_return;
  }
  if (error_status) {
    out = error_response({error_status, error_message, "", error_status == 504 ? "timeout" : ""});
    co_return;
  }
  if (b->cancelled) {  // the client went away: nobody reads this
    out = error_response({499, "the client went away", "", "cancelled"});
    co_return;
  }
  std::vector<oa::Choice> choices;
  for (int i = 0; i < n; ++i) {
    auto& o = outs[static_cast<std::size_t>(i)];
    const auto& r = **b->choices[static_cast<std::size_t>(i)].done;
    oa::Choice ch{i, spec.prefix + o.text, {}, finish_name(r.finish), o.logprobs};
    if (spec.tools_active) {
      auto parsed =
          agents::parse_tool_calls(call_text(spec, o.text), spec.tool_names, spec.first_tool_id);
      if (!parsed.calls.empty()) {
        ch.text = parsed.content;
        for (auto& call : parsed.calls) ch.tool_calls.push_back(agents::to_openai(call));
        ch.finish_reason = "tool_calls";
      }
    }
    choices.push_back(std::move(ch));
  }
  out = json_response(200, spec.chat ? oa::chat_completion(env, choices, usage)
                                     : oa::completion(env, choices, usage));
}

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
        out = error_response(
            {400,
             "tool_choice '" +
                 std::string(cr.tool_choice == oa::ToolChoice::required ? "required" : "function") +
                 "' cannot be enforced: a tool's parameters use a JSON Schema keyword weir "
                 "cannot constrain (the server's log names it); use tool_choice 'auto'",
             "tool_choice", "invalid_schema"});
        co_return;
      }
    }
    if (forced) {
      reply_prefix = "<tool_call>";
      spec.forced_prefix = "<tool_call>";
    }
  }
  // The template's markers are special tokens; what the messages hold is text (never EOS or a
  // turn marker), as /v1/completions reads its prompt.
  rq.prompt = m->chat->encode_prompt(msgs, tools, reply_prefix);
  std::int32_t max_new = 0;
  if (auto e = check_context(*m, rq.prompt.size(), cr.sampling.max_tokens, max_new)) {
    out = error_response(*e);
    co_return;
  }
  rq.max_new_tokens = max_new;
  // The stop filter trims the user's stop sequences; a tool call keeps its closing tag.
  co_await run_generation(*this, ex, *m, std::move(rq), cr.sampling, spec, out, streamed);
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
  if (auto e = check_context(*m, rq.prompt.size(), cr.sampling.max_tokens, max_new)) {
    e->param = e->param == "messages" ? "prompt" : e->param;
    out = error_response(*e);
    co_return;
  }
  rq.max_new_tokens = max_new;
  co_await run_generation(*this, ex, *m, std::move(rq), cr.sampling, spec, out, streamed);
}

// --- lifecycle ------------------------------------------------------------------------------

}  // namespace weir::serve
