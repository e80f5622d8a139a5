"""Planning a step: a new task, the limits before a model call, what the model is sent,
and what its reply (or its failure) does.

Rules:
- Hard limits (rule A2, docs/architecture.md): the step that would reach ``max_rounds``, or a
  task that has used ``max_tool_calls`` tool calls, gets one final call without tools, told to
  answer now (``prompt.LIMIT_NOTE``); the limit is the task's ``stop_reason``.
- Stops without a call (rules E2-E4, docs/agent-rules.md): past ``task_deadline_s``, when the
  step's estimated cost does not fit ``max_tokens``, or after ``max_failed_steps`` failed steps
  in a row, the task ends with a wrap-up (``endings.wrap_up``). Each call is bounded by
  ``model_call_cap_s`` and by the time left (rule E1, E2).
- Empty answer (rule E4): one forced final call without tools, then a wrap-up.
- Pre-router (rule R1): ``start`` applies the route (``routing``).
- Soft limit (rule A3): two rounds or two tool calls before a hard limit the model is told to
  finish soon (``prompt.SOFT_LIMIT_NOTE``).
- Window (rule A4): the history sent is cut to ``context_window_chars`` (``window.window``).
- Date (rule V1, docs/agent-rules.md): the system prompt sent ends with the day the task was asked in
  its tenant's zone (``state.asked_on``, set once by ``start``) and the time its question names.
- Tool schemas: the task's allowed tools, none on a final call.
- Retrieval-only mode (rule A13; no model configured, the model failed, or its breaker is open):
  one real ``kb_search`` for the question, then an answer quoting the evidence
  (``fallback.compose``).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from conduit.policy import guardrails
from conduit.runtime import tenants
from contracts.api import SessionContext, StepRecord
from contracts.events import QuestionAsked
from contracts.evidence import NumberedEvidence
from contracts.mcp import McpTool
from contracts.stream import AnswerDelta, AnswerReset, StepStarted, TraceEvent
from contracts.tools import KB_QUERY_MAX_CHARS
from services.orchestrator.agent import (cache, dates, endings, fallback, finalizer, modelchain, modelfailures,
                                         planner, prompt, review, routing, team, vetting, workers)
from services.orchestrator.agent import context as context_rules
from services.orchestrator.agent.cache import Recalled
from services.orchestrator.agent.deps import Deps
from services.orchestrator.agent.modelchain import Candidate
from services.orchestrator.agent.stepplan import StepPlan, model_fields, tool_schema  # noqa: F401 - planning's public names too
from services.orchestrator.agent.limits import (  # noqa: F401 - planning's public names too
    COMPLETION_RESERVE_TOKENS, SOFT_LIMIT_MARGIN, estimate_tokens, hard_limit, soft_limit, stop_before, time_left_s)
from services.orchestrator.agent.effects import (
    FaultPoint, HoldLease, Public, RunModelStep, SaveContext, Step, Summarise, WriteView)
from services.orchestrator.agent.routing import RouteDecision
from services.orchestrator.agent.state import Phase, TaskState
from services.orchestrator.agent.window import window
from conduit.runtime.llm.model import MODEL_UNAVAILABLE, ModelResponse, parse_arguments


def start(deps: Deps, event: QuestionAsked, allowed_tools: list[str], turns: list[dict[str, Any]],
          route: RouteDecision | None = None, recalled: Recalled | None = None,
          now: datetime | None = None, context: SessionContext | None = None,
          mcp_tools: list[McpTool] | None = None) -> Step:
    """A new task from ``event`` with the session's earlier ``turns`` as history.

    Effects: the lease is taken in the save (a crash after it is resumed by the sweeper),
    then the first model step, the record and the public ``task.started``. A question the
    input guardrail rejects (rule G1; the gateway checks it first, this guards the bus) fails
    at once with ``input_rejected``, before any model call. ``route`` is the pre-router's
    decision (rule R1; None: the rules of ``routing.by_rules`` are applied here). ``recalled``:
    the memory items and the cache lookup found before the task (rules M4, C1); a cache hit is
    replayed at once (rule C3, no model or tool call). ``now``: UTC (default: the question's time).
    ``turns`` are all the session's stored turns; with the session's ``context`` they are folded (rules M6,
    M7): the newest are history messages, the rest in the state's system message. ``mcp_tools``: the
    tenant's MCP tools to offer besides (their names join ``allowed_tools``; rule M11: ``cache.apply_recall``).
    """
    first_turn = not turns
    turn_no = context_rules.turn_number(turns, len(turns) - 1) + 1 if turns else 1
    s = deps.settings.agent
    all_turns = turns
    folded, turns = context_rules.fold(context or SessionContext(), turns, s.context_window_chars,
                                       s.context_summary_at, s.history_turns)
    model = deps.model_configured
    state = TaskState(
        task_id=event.task_id, session_id=event.session_id, tenant_id=event.tenant_id, user_id=event.user_id,
        traceparent=event.traceparent, cause_id=event.event_id, question=event.payload.question,
        allowed_tools=[*allowed_tools, *(t.name for t in mcp_tools or [])], mcp_tools=mcp_tools or [],
        status="running", created_at=event.occurred_at, scope=event.payload.scope,  # rule Q2: held for the task
        mode="agent" if model else "retrieval_only", fallback_reason=None if model else "no_model_configured",
        messages=[{"role": "system", "content": prompt.SYSTEM_PROMPT}, *prompt.history_messages(turns),
                  {"role": "user", "content": event.payload.question}],
    )
    state.turn_no, state.model = turn_no, event.payload.model  # rule A20: the request's model, kept for every call
    state.time_zone = tenants.policy(deps.settings, event.tenant_id).time_zone or dates.DEFAULT_ZONE
    state.asked_on = dates.local_date(event.occurred_at, state.time_zone)  # rule V1: the day asked, kept on resume
    _continue_with_earlier_evidence(state, turns)
    if event.payload.child is not None:
        return _start_child(deps, state, event, allowed_tools)
    note = context_rules.render(folded)
    if note is not None:
        state.messages.insert(1, {"role": "system", "content": note})
    kinds = workers.offered(deps.settings, state.allowed_tools) if deps.model_configured and team.team_mode(deps, event) else []
    if kinds:  # rule D1: the supervisor delegates to the worker kinds available; A31: MCP tools are the tree's too
        state.team, state.workers, state.tree_tools = True, [k.name for k in kinds], list(state.allowed_tools)
        state.allowed_tools = ["delegate"]
        state.messages[0] = {"role": "system", "content": team.supervisor_prompt(kinds)}
        state.trace.append({"phase": "team", "workers": state.workers})
    rejected = guardrails.check(state.question)
    if rejected is not None:
        state.trace.append({"phase": "guardrail", "category": rejected.category, "rule": rejected.rule})
        return Step(state, [Public("task.started")]).then(
            endings.fail(state, "input_rejected", rejected.message(state.question), event.occurred_at))
    recalled = recalled or Recalled()
    state.first_turn = first_turn
    step = Step(state, [Public("task.started"), FaultPoint("started")]).then(  # a crash test's point after the save
        cache.apply_recall(state, recalled, event.payload.allowed_tools))
    if context is not None and folded != context:
        step.effects += _context_effects(deps, state, folded, all_turns)
    if recalled.cached is not None:
        return step.then(cache.replay(state, recalled, now or event.occurred_at))
    route = route or routing.by_rules(state.question)
    if route is not None:
        state.trace.append({"phase": "route", **route.trace()})
        step.emit(TraceEvent(phase="route", data=route.trace()))
        routed = _routed(deps, state, route, turns, event.occurred_at)
        if routed is not None:
            return step.then(routed)
    state.plan_due = planner.wanted(deps, state, bool(route and route.calc_hint))  # rule A25
    return step.then(Step(state, [HoldLease(), RunModelStep(), WriteView()]))


def _context_effects(deps: Deps, state: TaskState, folded: SessionContext, turns: list[dict[str, Any]]) -> list:
    """Rules M6, M7: save the session's changed context; with a model (and ``context_summary="model"``)
    the model then rewrites its summary, after the save and off this task's path."""
    s = deps.settings.agent
    effects: list = [SaveContext(state.session_id, folded)]
    asked = context_rules.summary_request(folded, turns) if deps.model_configured and s.context_summary == "model" else None
    if asked is not None:
        effects.append(Summarise(state.session_id, folded.folded, asked, modelchain.candidates(deps, state)[0].sent))
    return effects


def _start_child(deps: Deps, state: TaskState, event: QuestionAsked, available: list[str]) -> Step:
    """A worker's task (team mode): its kind's prompt and tools, no history and no pre-router; its
    budget is its share of the tree's (``state.child``, rule D4)."""
    child = event.payload.child
    assert child is not None
    state.child = child
    kind = workers.kind(deps.settings, child.worker)
    if kind is None:
        return Step(state, [Public("task.started")]).then(
            endings.fail(state, "unknown_worker", f"no worker kind {child.worker!r}", event.occurred_at))
    available = list(state.allowed_tools)  # its tools and the MCP tools the tree may use (rule A31)
    state.allowed_tools = workers.tools_of(kind, available, child.depth, deps.settings.agent.team_max_depth)
    if "delegate" in state.allowed_tools:
        state.team, state.tree_tools = True, available
        state.workers = [k.name for k in workers.offered(deps.settings, available)]
    state.messages = team.worker_messages(kind, state.question)
    return Step(state, [Public("task.started"), HoldLease(), RunModelStep(), WriteView()])


def _continue_with_earlier_evidence(state: TaskState, turns: list[dict[str, Any]]) -> None:
    """Rule E10: when the session's last turn ended asking the user a question, the reply continues
    with that turn's evidence: same numbers in the pool, shown to the model as a (wrapped) tool result
    before the reply."""
    earlier = [NumberedEvidence.model_validate(e) for e in (turns[-1].get("evidence") or [])] if turns else []
    if not earlier:
        return
    state.evidence = earlier
    call = {"id": "call_earlier_evidence", "type": "function", "function": {"name": "kb_search", "arguments": "{}"}}
    state.messages[-1:-1] = [{"role": "assistant", "content": None, "tool_calls": [call]},
                             {"role": "tool", "tool_call_id": call["id"], "content": prompt.render_evidence(earlier, state.asked())}]


def _routed(deps: Deps, state: TaskState, route: RouteDecision, turns: list[dict[str, Any]],
            now: datetime) -> Step | None:
    """Rule R1's routes: out of scope and chit-chat without a model answer at once; chit-chat with a
    model gets its own agent (prompt, history, no tools); a calculation gets the ``code_exec`` hint.
    None: the normal agent's first step follows."""
    domain = routing.domain_for(deps.settings.tenancy.tenant_domains, state.tenant_id)
    if route.route == "out_of_scope" or (route.route == "chitchat" and not deps.model_configured):
        state.mode, state.fallback_reason, state.allowed_tools = route.route, None, []
        reply = (routing.out_of_scope_reply if route.route == "out_of_scope" else routing.fixed_reply)(
            state.question, domain)
        return Step(state).emit(AnswerDelta(text=reply)).then(endings.complete(state, reply, now))
    if route.route == "chitchat":
        state.mode, state.fallback_reason, state.allowed_tools = "chitchat", None, []
        memory = [m for m in state.messages[1:2] if m["role"] == "system"] if state.memory else []
        state.messages = routing.chitchat_messages(domain, prompt.history_messages(turns), state.question)
        state.messages[1:1] = memory  # rule M4: the chit-chat agent knows the user too
        return Step(state, [HoldLease(), RunModelStep(), WriteView()])
    if route.calc_hint and "code_exec" in state.allowed_tools:
        state.messages.insert(-1, {"role": "system", "content": routing.CALC_HINT})
    return None


def _side_call(deps: Deps, state: TaskState, now: datetime) -> StepPlan | None:
    """The step's call when it is a side call without tools and not counted as a round: the planner's
    (rule A25), the reviewer's (rule A22, not streamed either) or the finalizer's (rule D9); None for
    an ordinary step. Each is limited by its own cap and the time left before the deadline (rule E2)."""
    s = deps.settings
    if state.plan_due:  # (the part, its time cap in seconds, its max_tokens, streamed to the client)
        part, cap, max_tokens, stream = planner, s.llm.model_call_cap_s, planner.PLAN_MAX_TOKENS, False
    elif state.reviewing is not None:
        part, cap, max_tokens, stream = review, s.agent.review_timeout_s, s.agent.review_max_tokens, False
    elif state.draft is not None:
        part, cap, max_tokens, stream = finalizer, s.llm.model_call_cap_s, None, True
    else:
        return None
    choice = modelchain.choose(deps, state, now, tools=False) if deps.model_configured else None
    use = isinstance(choice, Candidate)
    timeout = min(cap, max(0.0, time_left_s(deps, state, now)))
    return StepPlan(part.plan_started(state), True, use, part.messages(state) if use else [], None, max_tokens,
                    timeout, stream=stream, **model_fields(choice))


def plan_step(deps: Deps, state: TaskState, now: datetime) -> StepPlan:
    """Count the step (``state.step``, ``state.rounds``), apply the limits and choose the mode.

    Changes ``state`` in place: the stop reason of a hard limit, and retrieval-only mode when
    no model of the task's chain can take the call (``modelchain.choose``, rule A21: breakers open,
    or none calls tools). Time ``now`` is UTC. The call's time limit is ``model_call_cap_s`` (rule
    E1) or the time left before the deadline (rule E2).
    """
    side = _side_call(deps, state, now)
    if side is not None:
        return side
    hit = None if state.mode == "chitchat" else (hard_limit(deps, state, now) or ("empty_answer" if state.forced_final else None))
    soft = hit is None and soft_limit(deps, state)
    state.step += 1
    state.rounds += 1
    started = StepStarted(step=state.step, phase="final" if hit else "model")
    use_model = deps.model_configured and state.mode != "retrieval_only"
    choice = modelchain.choose(deps, state, now, tools=state.mode != "chitchat" and not hit and bool(state.allowed_tools)
                               ) if use_model else None
    if isinstance(choice, str):  # rule A21: no model of the chain can take it
        state.mode, state.fallback_reason, use_model = "retrieval_only", choice, False
    if not use_model or not isinstance(choice, Candidate):
        return StepPlan(started, hit is not None, False, [], None)
    timeout = min(deps.settings.llm.model_call_cap_s, max(0.0, time_left_s(deps, state, now)))
    if state.mode == "chitchat":  # rule R1: its own prompt and history, no tools, a small cap
        return StepPlan(started, True, True, prompt.dated(state.messages, state.asked(), rules=False), None,
                        routing.CHITCHAT_MAX_TOKENS, timeout, **model_fields(choice))
    messages = window(prompt.dated(state.messages, state.asked()),  # rule V1
                      modelchain.window_chars(deps, state, choice.endpoint))  # rules A4, A18, A21
    stop = stop_before(deps, state, messages, now)
    if stop is not None:
        state.stop_reason = stop
        return StepPlan(started, True, False, [], None, stop=stop)
    if hit is not None and hit != "empty_answer":
        state.stop_reason = hit
    if state.plan and not hit:  # rule A25: the plan and its progress
        messages.append(planner.note(state))
    if hit:
        messages.append({"role": "system", "content": prompt.EMPTY_NOTE if hit == "empty_answer" else prompt.LIMIT_NOTE})
    elif soft:
        messages.append({"role": "system", "content": prompt.SOFT_LIMIT_NOTE})
    tools = None if hit or not state.allowed_tools else [tool_schema(state, t) for t in state.allowed_tools]
    return StepPlan(started, hit is not None, True, messages, tools, timeout_s=timeout,
                    stream=not finalizer.wanted(state), **model_fields(choice))


def on_reply(deps: Deps, state: TaskState, plan: StepPlan, reply: ModelResponse, now: datetime,
             cancelled: bool = False) -> Step:
    """The model answered: record usage and timing, then end the task (``cancelled``: a
    cancel came during the call), request its tool calls, or complete with its text.
    Tool calls of a final call are ignored (the text is the answer); a tool name no catalog knows
    fails the step like a failed call (rule A19, ``unknown_tool_name``). An empty answer gets one
    forced final call without tools, then a wrap-up (rule E4)."""
    state.usage = state.usage.add(reply.usage)
    modelchain.answered(state, plan.endpoint)
    llm = {"step": state.step, "model": plan.endpoint, "first_token_s": reply.first_token_s, "total_s": round(reply.total_s, 4),
           "retries": reply.retries, "prompt_tokens": reply.usage.prompt_tokens,
           "completion_tokens": reply.usage.completion_tokens, "finish_reason": reply.finish_reason}
    state.trace.append({"phase": "llm", **llm})
    state.steps.append(StepRecord(step=state.step, kind="model", duration_ms=round(reply.total_s * 1000, 2)))
    step = Step(state).emit(TraceEvent(phase="llm", data=llm))
    if cancelled:
        return step.then(endings.cancel(state, "cancelled by user", now))
    if state.draft is not None:  # the finalizer's rewrite (rule D9)
        return step.then(finalizer.finish(deps, state, reply.content, plan.stream and bool(reply.content), now))
    if state.reviewing is not None:  # the reviewer's verdicts (rule A22)
        return step.then(review.finish(state, reply.content, now))
    if state.plan_due:  # the planner's plan (rule A25)
        return step.then(planner.on_plan(state, reply.content))
    if reply.tool_calls and not plan.final:
        unknown = modelfailures.unknown_names(state, reply.tool_calls)
        if unknown:  # rule A19: a model-protocol error, not a refusal
            error = f"the model asked for tools no catalog has: {', '.join(map(repr, unknown))}"[:300]
            streamed = plan.stream and bool(reply.content)
            return step.then(on_model_failed(deps, state, error, streamed, now, modelfailures.UNKNOWN_TOOL_NAME,
                                             plan.endpoint))
        if reply.content:
            step.emit(AnswerReset(reason="the model decided to call tools"))
        state.messages.append({
            "role": "assistant", "content": reply.content or None,
            "tool_calls": [{"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                           for c in reply.tool_calls],
        })
        calls = [(c.id, c.name, parse_arguments(c.arguments)) for c in reply.tool_calls]
        return step.then(vetting.request_tools(deps, state, calls, now))
    if reply.content.strip().startswith(prompt.NEEDS_INPUT) and state.mode == "agent":  # rule E10
        asked = reply.content.strip()[len(prompt.NEEDS_INPUT):].strip()
        if asked:
            return step.then(endings.needs_input(state, asked, now))
    if not reply.content.strip() and state.mode == "chitchat":
        fixed = routing.fixed_reply(state.question, routing.domain_for(deps.settings.tenancy.tenant_domains, state.tenant_id))
        return step.emit(AnswerDelta(text=fixed)).then(endings.complete(state, fixed, now))
    if not reply.content.strip():
        if not state.forced_final:
            state.forced_final = True
            return step.then(Step(state, [HoldLease(), RunModelStep(), WriteView()]))
        return step.then(endings.wrap_up(state, state.stop_reason or "empty_answer", now))
    if finalizer.wanted(state):
        return step.then(finalizer.begin(state, reply.content))
    if review.wanted(deps, state, reply.content):
        return step.then(review.begin(state, reply.content))
    return step.then(endings.complete(state, reply.content, now))


def on_model_failed(deps: Deps, state: TaskState, error: str, streamed: bool, now: datetime,
                    code: str = MODEL_UNAVAILABLE, model: str | None = None) -> Step:
    """The call to the configured model ``model`` failed with ``code`` (``ModelError.code``, after
    its own retries) or its reply could not be used (rule A19): the failure is traced and counted
    (``modelfailures.record``); a context exceeded before anything streamed folds the history once
    and runs the step again (rule A18); a failure before anything streamed runs the step again on
    the chain's next model, not counted as a round (rule A21); past the deadline the task ends with
    a wrap-up (rule E2); the chit-chat agent gives its fixed reply; otherwise switch to
    retrieval-only mode, ``fallback_reason`` ``"<code>: <error>"``. Text already streamed is
    withdrawn with ``answer.reset``."""
    step = Step(state)
    if streamed:
        step.emit(AnswerReset(reason="the model call failed; answering from the knowledge base"))
    step.then(modelfailures.record(state, code, error, model))
    if state.reviewing is not None:  # rule A22: the reviewer fails open
        return step.then(review.failed(state, code, now))
    if state.plan_due:  # rule A25: the planner fails open
        return step.then(planner.failed(state, code))
    rerun = Step(state, [HoldLease(), RunModelStep(), WriteView()])
    if time_left_s(deps, state, now) > 0 and modelfailures.retry_after_fold(deps, state, code, streamed):
        return step.then(rerun)
    if time_left_s(deps, state, now) > 0 and not streamed and modelchain.next_after_failure(deps, state, model, code, now):
        state.rounds -= 1  # rule A21: the same round, on the next model
        moved = {k: v for k, v in state.trace[-1].items() if k != "phase"}
        return step.emit(TraceEvent(phase="model_fallback", data=moved)).then(rerun)
    if state.draft is not None:  # rule D9: the draft is the answer
        return step.then(finalizer.finish(deps, state, "", False, now))
    if time_left_s(deps, state, now) <= 0:
        state.stop_reason = "deadline"
        return step.then(endings.wrap_up(state, "deadline", now))
    if state.mode == "chitchat":
        reply = routing.fixed_reply(state.question, routing.domain_for(deps.settings.tenancy.tenant_domains, state.tenant_id))
        return step.emit(AnswerDelta(text=reply)).then(endings.complete(state, reply, now))
    state.mode, state.fallback_reason = "retrieval_only", f"{code}: {error}"[:300]
    return step.then(retrieval_only_step(deps, state, now))


def _searched(state: TaskState) -> bool:
    """True once this task asked for a ``kb_search``, whatever its outcome: a retrieval-only task
    searches once (a refused or failed search is answered with what there is, never asked again)."""
    return any(call.get("function", {}).get("name") == "kb_search"
               for m in state.messages if m.get("role") == "assistant" for call in m.get("tool_calls") or [])


def retrieval_only_step(deps: Deps, state: TaskState, now: datetime) -> Step:
    """No model: one real ``kb_search`` for the question, then an answer from the evidence
    (the chit-chat agent's fixed reply for a chit-chat task; a supervisor's draft without a finalizer)."""
    if state.draft is not None:
        return finalizer.finish(deps, state, "", False, now)
    if state.reviewing is not None:  # no model for the reviewer (rule A22): the answer stands
        return review.failed(state, "model_unavailable", now)
    if state.plan_due:  # no model for the planner (rule A25): no plan
        return planner.failed(state, "model_unavailable")
    if state.mode == "chitchat":
        reply = routing.fixed_reply(state.question, routing.domain_for(deps.settings.tenancy.tenant_domains, state.tenant_id))
        return Step(state).emit(AnswerDelta(text=reply)).then(endings.complete(state, reply, now))
    if state.team:  # a supervisor without its model searches itself (rule A13)
        state.allowed_tools = list(state.tree_tools)
    if not _searched(state) and not state.evidence and not fallback.only_a_model_request(state.question):  # rule O4
        call_id = deps.new_call_id()
        state.messages.append({
            "role": "assistant", "content": None,
            "tool_calls": [{"id": call_id, "type": "function", "function": {"name": "kb_search", "arguments": "{}"}}],
        })
        # a question may be longer than a query may be (KB_QUERY_MAX_CHARS, 500): its start is searched
        args = {"query": state.question[:KB_QUERY_MAX_CHARS], "reason": "检索知识库中与问题最相关的原文"}
        return vetting.request_tools(deps, state, [(call_id, "kb_search", args)], now)
    answer = fallback.compose(state.question, state.evidence, deps.model_configured, state.asked())  # rules O4, V2, V3
    step = Step(state).emit(*(AnswerDelta(text=para + "\n\n") for para in answer.split("\n\n")))
    return step.then(endings.complete(state, answer.rstrip(), now))


def resumable(state: TaskState) -> bool:
    """True when a model step may run on ``state`` (not ended, not waiting for tools)."""
    return not state.terminal and state.phase == Phase.MODEL
