/* Palaestra trajectory viewer: one script for the static report (data embedded in the page) and the
   live viewer (data from /api/...). Every value from a run is untrusted model or user output, so it
   only ever reaches the page through textContent or attribute setters, never as markup. */
(function () {
  "use strict";
  const DATA = JSON.parse(document.getElementById("palaestra-data").textContent);
  const C = {};
  DATA.columns.forEach((c, i) => { C[c] = i; });
  const LIVE = DATA.mode === "live";
  const PAGE = 50;
  const state = { offset: 0, selected: null, version: null, overviewAt: 0, overviewVersion: null };
  const $ = (id) => document.getElementById(id);

  function el(tag, props, kids) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(props || {})) {
      if (v === null || v === undefined) continue;
      if (k === "text") e.textContent = String(v);
      else if (k === "cls") e.className = v;
      else if (k === "on") for (const [ev, fn] of Object.entries(v)) e.addEventListener(ev, fn);
      else e.setAttribute(k, String(v));
    }
    for (const kid of kids || []) if (kid !== null && kid !== undefined) e.append(kid);
    return e;
  }
  const val = (x) => (x === null || x === undefined ? "–" : String(x));
  const fmt = (x, d) => (x === null || x === undefined ? "–" : Number(x).toFixed(d === undefined ? 3 : d));
  const secs = (x) => (x === null || x === undefined ? "–" : x < 1 ? (x * 1000).toFixed(1) + " ms" : x.toFixed(2) + " s");

  /* ---- filters (mirror of rows.Filter.matches) ---- */
  function readFilter() {
    const num = (id) => { const v = $(id).value.trim(); return v === "" ? null : Number(v); };
    return { task: $("f-task").value, outcome: $("f-outcome").value, min: num("f-min"), max: num("f-max"),
             effective: $("f-effective").checked };
  }
  function isPass(r) {
    if (r[C.status] !== "scored" || r[C.reward] === null) return false;
    return r[C.passed] !== null ? r[C.passed] : r[C.reward] >= 1;
  }
  function outcomeMatches(o, r) {
    const scored = r[C.status] === "scored" && r[C.reward] !== null;
    const [base, kind] = o.split(":");
    switch (base) {
      case "all": return true;
      case "scored": return scored;
      case "passed": return isPass(r);
      case "not_passed": return scored && !isPass(r);
      case "unscored": return !scored;
      case "timed_out": return r[C.status] === "timed_out";
      default: return r[C.status] === "failed" && (!kind || r[C.kind] === kind);
    }
  }
  function matches(f, r) {
    if (f.task && r[C.task_id] !== f.task) return false;
    if (f.effective && !r[C.effective]) return false;
    if (!outcomeMatches(f.outcome, r)) return false;
    if (f.min !== null || f.max !== null) {
      if (r[C.status] !== "scored" || r[C.reward] === null) return false;
      if (f.min !== null && r[C.reward] < f.min) return false;
      if (f.max !== null && r[C.reward] > f.max) return false;
    }
    return true;
  }
  function query(f) {
    const p = new URLSearchParams({ offset: state.offset, limit: PAGE, outcome: f.outcome });
    if (f.task) p.set("task", f.task);
    if (f.min !== null) p.set("min_reward", f.min);
    if (f.max !== null) p.set("max_reward", f.max);
    if (f.effective) p.set("effective", "1");
    return p.toString();
  }

  /* ---- data access: embedded or over the API ---- */
  async function getJSON(path) {
    const res = await fetch(path, { headers: { Accept: "application/json" } });
    if (!res.ok) throw new Error(path + ": HTTP " + res.status);
    return res.json();
  }
  async function fetchPage(f) {
    if (LIVE) return getJSON("api/rows?" + query(f));
    const all = DATA.rows.filter((r) => matches(f, r));
    return { rows: all.slice(state.offset, state.offset + PAGE), matched: all.length, total: DATA.rows.length,
             complete: true };
  }
  async function fetchDetail(seq) {
    if (LIVE) return getJSON("api/rollout/" + seq);
    return DATA.details[String(seq)] || null;
  }

  /* ---- the list ---- */
  function outcomeBadge(status, kind, reward, passed) {
    if (status === "scored") {
      const ok = passed !== null ? passed : reward >= 1;
      return el("span", { cls: "badge " + (ok ? "pass" : "fail"), text: ok ? "passed" : "not passed" });
    }
    return el("span", { cls: "badge " + status, text: status === "failed" ? "failed: " + (kind || "?") : status });
  }
  function renderRows(page) {
    const body = $("rows").tBodies[0];
    body.replaceChildren();
    for (const r of page.rows) {
      const tr = el("tr", { cls: "row" + (r[C.effective] ? "" : " superseded"), "data-seq": r[C.seq],
                            title: r[C.message] || null }, [
        el("td", { text: r[C.seq] }), el("td", { text: r[C.task_id] }), el("td", { text: r[C.repeat] }),
        el("td", { text: r[C.attempt] }),
        el("td", {}, [outcomeBadge(r[C.status], r[C.kind], r[C.reward], r[C.passed])]),
        el("td", { text: fmt(r[C.reward]) }), el("td", { text: r[C.steps] }),
        el("td", { text: r[C.prompt_tokens] + r[C.completion_tokens] }), el("td", { text: secs(r[C.total_s]) }),
      ]);
      if (r[C.seq] === state.selected) tr.classList.add("selected");
      tr.addEventListener("click", () => openRollout(r[C.seq]));
      body.append(tr);
    }
    if (!page.rows.length) body.append(el("tr", {}, [el("td", { colspan: 9, cls: "empty", text: "no rollouts match" })]));
    const end = state.offset + page.rows.length;
    $("page-info").textContent = (page.matched ? state.offset + 1 : 0) + "–" + end + " of " + page.matched +
      " matching (" + page.total + " in journal" + (page.complete ? "" : ", still indexing") + ")";
    $("prev").disabled = state.offset === 0;
    $("next").disabled = end >= page.matched;
  }
  async function refreshList() {
    try { renderRows(await fetchPage(readFilter())); }
    catch (err) { $("page-info").textContent = "could not load rollouts: " + err.message; }
  }

  /* ---- one rollout ---- */
  const section = (title, kids) => el("section", {}, [el("h4", { text: title })].concat(kids));
  const pre = (text) => el("pre", { text: text === null || text === undefined ? "" : text });
  function kvTable(obj, f) {
    const rows = Object.entries(obj || {}).map(([k, v]) => el("tr", {}, [el("th", { text: k }), el("td", { text: f ? f(v) : v })]));
    return el("table", { cls: "grid" }, rows);
  }
  function renderMessage(m) {
    const kids = [el("div", { cls: "role", text: m.role + (m.name ? " · " + m.name : "") +
                              (m.tool_call_id ? " · " + m.tool_call_id : "") })];
    if (m.reasoning) kids.push(el("details", {}, [el("summary", { text: "reasoning" }), pre(m.reasoning)]));
    if (m.content !== null && m.content !== undefined && m.content !== "") kids.push(pre(m.content));
    for (const c of m.tool_calls || []) kids.push(el("div", { cls: "call" }, [el("b", { text: "→ " + c.name }), pre(c.arguments)]));
    return el("div", { cls: "msg role-" + m.role.replace(/[^a-z_-]/gi, "") }, kids);
  }
  function renderToolCall(c, i) {
    return el("div", { cls: "call" + (c.status === "error" ? " error" : "") }, [
      el("b", { text: "#" + i + " " + c.name }),
      el("span", { cls: "muted", text: "  " + c.status + " · " + secs(c.duration_s) + (c.t !== null ? " · at +" + secs(c.t) : "") }),
      el("div", { cls: "muted", text: "arguments" }), pre(c.arguments),
      el("div", { cls: "muted", text: c.error ? "error" : "output" }), pre(c.error || c.output),
    ]);
  }
  function tokenChip(text, lp, id, prompt) {
    const chip = el("span", { cls: "tok" + (prompt ? " prompt" : ""), text: text });
    if (!prompt && lp !== null && lp !== undefined) {
      const p = Math.exp(lp);
      chip.style.backgroundColor = "hsl(" + Math.round(120 * p) + ", 75%, " + (80 + 10 * p).toFixed(0) + "%)";
      chip.title = (id !== null && id !== undefined ? "id " + id + " · " : "") + "logprob " + lp.toFixed(3) + " · p " + p.toFixed(3);
    } else if (id !== null && id !== undefined) chip.title = "id " + id + (prompt ? " · prompt (loss mask 0)" : "");
    return chip;
  }
  const pieceText = (t, j) => (t.pieces ? t.pieces[j] : String(t.ids ? t.ids[j] : "?"));
  function renderTokens(tv) {
    const kids = [el("div", { cls: "legend", text: tv.n_generated + " generated tokens · mean logprob " + fmt(tv.mean_logprob) +
      " · min " + fmt(tv.min_logprob) + (tv.checked_turns ? " · drift checked on " + tv.checked_turns + " turn(s), " + tv.drifted_turns +
      " drifted" : " · drift not checked (no later turn)") + " · colour: red = unlikely, green = likely" })];
    for (const t of tv.turns) {
      const head = [el("b", { text: "model call #" + t.call }),
                    el("span", { cls: "muted", text: "  prompt " + (t.prompt_len === null ? "?" : t.prompt_len) + " tokens · generated " + t.n })];
      if (t.drift) head.push(el("span", { cls: "badge drift", text: "drift at prompt token " + t.drift_at }));
      const chips = [];
      for (let j = 0; j < t.n; j++) chips.push(tokenChip(pieceText(t, j), t.logprobs ? t.logprobs[j] : null, t.ids ? t.ids[j] : null, false));
      kids.push(el("div", { cls: "turn" }, [el("div", {}, head), el("div", { cls: "tokens" }, chips)]));
    }
    if (tv.sequence) {
      const seq = tv.sequence, mask = new Map();
      for (const [s, e, k] of seq.mask_spans) for (let i = s; i < e; i++) mask.set(i, [tv.turns[k], i - s]);
      const chips = [], n = Math.min(seq.ids.length, 4000);
      for (let i = 0; i < n; i++) {
        const m = mask.get(i);
        chips.push(m ? tokenChip(pieceText(m[0], m[1]), m[0].logprobs ? m[0].logprobs[m[1]] : null, seq.ids[i], false)
                     : tokenChip(String(seq.ids[i]), null, seq.ids[i], true));
      }
      kids.push(el("details", { cls: "sequence" }, [
        el("summary", { text: "whole sequence with loss mask (" + seq.length + " tokens; grey = mask 0: prompt, tool and environment tokens)" +
          (n < seq.ids.length || seq.truncated ? " — first " + n + " shown" : "") }),
        el("div", { cls: "tokens" }, chips)]));
    } else {
      kids.push(el("div", { cls: "legend", text: "no single-sequence loss mask: a turn drifted or prompt ids are missing" }));
    }
    return section("Tokens", kids);
  }
  function renderDetail(d) {
    const pane = $("detail");
    pane.replaceChildren();
    const v = d.verdict;
    pane.append(el("h3", { text: d.task_id + " · repeat " + d.repeat + " · attempt " + d.attempt }),
      el("div", { cls: "muted", text: "rollout " + d.rollout_id + " · " + d.env + " · " + d.agent + " · " + d.model }),
      el("div", {}, [outcomeBadge(d.outcome.status, d.outcome.kind, v ? v.reward : null, v ? v.passed : null),
                     el("span", { text: v ? "  reward " + fmt(v.reward) : "" })]));
    if (d.outcome.message) pane.append(section("Outcome", [pre(d.outcome.message)]));
    if (v) {
      const kids = [kvTable(v.components, (x) => fmt(x))];
      if (v.answer !== null && v.answer !== undefined) kids.unshift(el("div", { text: "answer: " + v.answer }));
      if (v.metadata) kids.push(el("details", {}, [el("summary", { text: "verifier metadata" }), pre(v.metadata)]));
      pane.append(section("Verdict", kids));
    }
    pane.append(section("Timings and usage", [el("div", { cls: "charts" }, [kvTable(d.timings, secs), kvTable(d.usage)]),
      el("div", { cls: "muted", text: "steps " + val(d.steps) + " · stop " + val(d.stop_reason) + " · parse failures " + val(d.parse_failures) +
        (d.tools && d.tools.length ? " · tools offered: " + d.tools.join(", ") : "") })]));
    pane.append(section("Transcript (" + d.messages.length + " messages)", d.messages.map(renderMessage)));
    if (d.final_answer !== null && d.final_answer !== undefined) pane.append(section("Final answer", [pre(d.final_answer)]));
    pane.append(section("Tool calls (" + d.tool_calls.length + ")", d.tool_calls.map(renderToolCall)));
    const mc = d.model_calls.map((c, i) => el("tr", {}, [el("td", { text: i }), el("td", { text: c.api }), el("td", { text: c.status }),
      el("td", { text: secs(c.latency_s) }), el("td", { text: (c.usage.prompt_tokens || 0) + " / " + (c.usage.completion_tokens || 0) }),
      el("td", { text: c.finish_reason || "" }), el("td", { text: c.error || "" })]));
    pane.append(section("Model calls (" + d.model_calls.length + ")", [el("table", { cls: "grid" }, [el("tr", {},
      ["#", "api", "status", "latency", "tokens in / out", "finish", "error"].map((h) => el("th", { text: h })))].concat(mc))]));
    if (d.tokens) pane.append(renderTokens(d.tokens));
  }
  async function openRollout(seq) {
    state.selected = seq;
    for (const tr of document.querySelectorAll("#rows tr.row")) tr.classList.toggle("selected", Number(tr.dataset.seq) === seq);
    history.replaceState(null, "", "#rollout-" + seq);
    try {
      const d = await fetchDetail(seq);
      if (d) renderDetail(d);
      else $("detail").replaceChildren(el("div", { cls: "empty", text: "Rollout #" + seq + " is not embedded in this static " +
        "report (it keeps a size budget). Run `palaestra view " + (DATA.run_dir || "RUN_DIR") + "` to open every rollout." }));
    } catch (err) { $("detail").replaceChildren(el("div", { cls: "empty", text: "could not load rollout: " + err.message })); }
  }

  /* ---- filter controls ---- */
  function fillOptions(tasks, kinds) {
    const task = $("f-task"), keep = task.value;
    task.replaceChildren(el("option", { value: "", text: "all tasks (" + tasks.length + ")" }),
                         ...tasks.map((t) => el("option", { value: t, text: t })));
    if (keep && tasks.includes(keep)) task.value = keep;
    const outcome = $("f-outcome"), keepO = outcome.value;
    const opts = [["all", "any outcome"], ["scored", "scored"], ["passed", "passed"], ["not_passed", "scored, not passed"],
                  ["unscored", "not scored"], ["failed", "failed (any kind)"]].concat(kinds.map((k) => ["failed:" + k, "failed: " + k]))
                  .concat([["timed_out", "timed out"]]);
    outcome.replaceChildren(...opts.map(([v, t]) => el("option", { value: v, text: t })));
    outcome.value = opts.some((o) => o[0] === keepO) ? keepO : "all";
  }
  function setTask(task) {
    $("f-task").value = task;
    state.offset = 0;
    refreshList();
    $("rollouts").scrollIntoView();
  }
  async function refreshLive() {
    let st;
    try { st = await getJSON("api/status"); } catch (err) { $("live-status").textContent = "viewer server unreachable"; return; }
    $("live-status").textContent = "live · " + st.records + " rollouts" + (st.complete ? "" : " · indexing " +
      Math.round(100 * st.indexed_bytes / Math.max(1, st.size)) + "%") + (st.growing ? " · run in progress" : "");
    if (st.version !== state.version) {
      state.version = st.version;
      const facets = await getJSON("api/facets");
      fillOptions(facets.tasks, facets.kinds);
      await refreshList();
    }
    if (state.overviewVersion !== st.version && Date.now() - state.overviewAt > 5000) {
      state.overviewAt = Date.now();  /* charts of a big run cost seconds: at most one refresh per 5 s */
      const ov = await getJSON("api/overview");
      $("overview").innerHTML = ov.html; /* server-rendered by overview.py: every value escaped there */
      state.overviewVersion = ov.version;
    }
  }

  for (const id of ["f-task", "f-outcome", "f-min", "f-max", "f-effective"])
    $(id).addEventListener("change", () => { state.offset = 0; refreshList(); });
  $("f-reset").addEventListener("click", () => {
    $("f-task").value = ""; $("f-outcome").value = "all"; $("f-min").value = ""; $("f-max").value = "";
    $("f-effective").checked = false; state.offset = 0; refreshList();
  });
  $("prev").addEventListener("click", () => { state.offset = Math.max(0, state.offset - PAGE); refreshList(); });
  $("next").addEventListener("click", () => { state.offset += PAGE; refreshList(); });
  $("overview").addEventListener("click", (ev) => {
    const t = ev.target.closest("[data-task]");
    if (t) setTask(t.getAttribute("data-task"));
  });
  window.addEventListener("hashchange", () => {
    const m = /^#rollout-(\d+)$/.exec(location.hash);
    if (m && Number(m[1]) !== state.selected) openRollout(Number(m[1]));
  });
  const hash = /^#rollout-(\d+)$/.exec(location.hash);
  if (LIVE) {
    refreshLive().then(() => { if (hash) openRollout(Number(hash[1])); });
    setInterval(refreshLive, 2000);
  } else {
    const kinds = [...new Set(DATA.rows.filter((r) => r[C.status] === "failed" && r[C.kind]).map((r) => r[C.kind]))].sort();
    fillOptions(DATA.tasks, kinds);
    refreshList();
    if (hash) openRollout(Number(hash[1]));
  }
})();
