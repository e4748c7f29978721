"""Generated replies for ``test_nemo_parity_families.py``: per published NeMo Gym row, the gold answer, near
misses and malformed replies, each as a Responses ``output`` list (assistant messages and ``function_call``
items) that both NeMo Gym's verifier and Palaestra's environment read. Stdlib only; read by file path
(``runpy.run_path``), like ``nemo_side.py``. The variant names are what docs/nemo_gym_parity.md lists."""

from __future__ import annotations

import copy
import json
from typing import Any

Output = list[dict[str, Any]]


# ---- Responses output items ----------------------------------------------------------------------------

def message(text: str) -> dict[str, Any]:
    return {"id": "msg_parity", "type": "message", "role": "assistant", "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}]}


def call(name: str, arguments: Any, n: int = 1) -> dict[str, Any]:
    """A function_call item; ``arguments`` is sent as the JSON text a model writes (a str as it is)."""
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {"id": f"fc_{n}", "type": "function_call", "call_id": f"call_{n}", "name": name, "arguments": text,
            "status": "completed"}


def text(reply: str) -> Output:
    return [message(reply)]


def _tool_names(row: dict[str, Any]) -> list[str]:
    tools = (row.get("responses_create_params") or {}).get("tools") or []
    return [t.get("name") or (t.get("function") or {}).get("name") for t in tools]


# ---- a full instance of a JSON Schema (every property present) --------------------------------------------

def full_instance(schema: Any, defs: dict[str, Any] | None = None) -> Any:
    """A value of ``schema`` that names every property it declares: what a model filling a strict
    structured-output schema writes. Only the keywords the published schemas use are handled; the test
    checks the value against the schema before using it as the gold answer."""
    if not isinstance(schema, dict):
        return None
    defs = defs if defs is not None else {**schema.get("$defs", {}), **schema.get("definitions", {})}
    if "$ref" in schema:
        return full_instance(defs.get(schema["$ref"].rsplit("/", 1)[-1], {}), defs)
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][0]
    for key in ("anyOf", "oneOf"):
        if schema.get(key):
            options = [o for o in schema[key] if isinstance(o, dict) and o.get("type") != "null"] or schema[key]
            return full_instance(options[0], defs)
    kind = schema.get("type", "object" if "properties" in schema else "string")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object":
        return {k: full_instance(v, defs) for k, v in (schema.get("properties") or {}).items()}
    if kind == "array":
        return [full_instance(schema.get("items") or {}, defs) for _ in range(max(1, schema.get("minItems", 1)))]
    if kind == "integer":
        return int(schema.get("minimum", 1))
    if kind == "number":
        return float(schema.get("minimum", 1.5))
    if kind == "boolean":
        return True
    if kind == "null":
        return None
    fmt = schema.get("format")
    value = {"date": "2020-01-31", "date-time": "2020-01-31T12:00:00Z", "email": "a@example.com",
             "uri": "https://example.com/", "time": "12:00:00Z"}.get(fmt or "", "text")
    return value + "x" * max(0, schema.get("minLength", 0) - len(value))


def _drop_one_property(value: Any) -> Any:
    """The instance with the last property of its first object that has one removed (a missing field)."""
    out = copy.deepcopy(value)
    target = out[0] if isinstance(out, list) and out else out
    if isinstance(target, dict) and target:
        target.pop(next(reversed(target)))
    return out


def _wrong_type(value: Any) -> Any:
    """The instance with its first scalar value replaced by a value of another JSON type."""
    out = copy.deepcopy(value)
    target = out[0] if isinstance(out, list) and out else out
    if isinstance(target, dict):
        for k, v in target.items():
            if not isinstance(v, (dict, list)):
                target[k] = 12345 if isinstance(v, str) else "not the right type"
                break
    return out


def _extra_property(value: Any) -> Any:
    out = copy.deepcopy(value)
    target = out[0] if isinstance(out, list) and out else out
    if isinstance(target, dict):
        target["unexpected_field"] = "x"
    return out


def _only_required(schema: dict[str, Any], value: Any) -> Any:
    """The instance without the top-level properties its schema leaves optional (none left out when every
    property is required)."""
    target = schema.get("items", {}) if schema.get("type") == "array" else schema
    required = set(target.get("required") or [])
    keep = (lambda v: {k: x for k, x in v.items() if k in required}) if required else (lambda v: v)
    if isinstance(value, list):
        return [keep(v) if isinstance(v, dict) else v for v in value]
    return keep(value) if isinstance(value, dict) else value


def structured_cases(row: dict[str, Any]) -> list[tuple[str, Output]]:
    schema = json.loads(row["schema_str"])
    gold = full_instance(schema)
    key, tool = row.get("tool_payload_key"), row.get("tool_name")
    if row.get("response_mode") != "tool_call" or not tool:
        body = json.dumps(gold)
        return [("text_gold", text(body)), ("text_fenced", text(f"```json\n{body}\n```")),
                ("text_prose_then_json", text(f"Here it is:\n{body}")), ("text_missing_field",
                text(json.dumps(_drop_one_property(gold)))), ("text_wrong_type", text(json.dumps(_wrong_type(gold)))),
                ("text_extra_field", text(json.dumps(_extra_property(gold)))), ("text_not_json", text("{'a': 1,")),
                ("text_empty", text(""))]

    def wrap(payload: Any) -> Any:
        return {key: payload} if key else payload

    other = next((n for n in _tool_names(row) if n != tool), None)
    cases: list[tuple[str, Output]] = [
        ("tool_gold", [call(tool, wrap(gold))]),
        ("tool_gold_with_prose", [message("Here is the summary."), call(tool, wrap(gold))]),
        ("tool_missing_field", [call(tool, wrap(_drop_one_property(gold)))]),
        ("tool_wrong_type", [call(tool, wrap(_wrong_type(gold)))]),
        ("tool_extra_field", [call(tool, wrap(_extra_property(gold)))]),
        ("tool_empty_object", [call(tool, wrap({} if isinstance(gold, dict) else []))]),
        ("tool_arguments_not_json", [call(tool, '{"' + (key or "a") + '": {')]),
        ("tool_only_required", [call(tool, wrap(_only_required(schema, gold)))]),
        ("tool_gold_twice", [call(tool, wrap(gold)), call(tool, wrap(gold), 2)]),
        ("no_tool_call_text_json", text(json.dumps(wrap(gold)))),
        ("empty", text("")),
    ]
    if key:
        cases.append(("tool_payload_unwrapped", [call(tool, gold)]))
    if other:
        cases += [("wrong_tool", [call(other, wrap(gold))]),
                  ("distractor_then_gold", [call(other, wrap(gold)), call(tool, wrap(gold), 2)])]
    return cases


# ---- tool-call argument comparison ------------------------------------------------------------------------

def _args(raw: Any) -> dict[str, Any]:
    return json.loads(raw) if isinstance(raw, str) else dict(raw or {})


def _perturb(args: dict[str, Any]) -> dict[str, Any]:
    """The arguments with their first value changed (a near miss of the same type)."""
    out = dict(args)
    for k, v in out.items():
        out[k] = (v + 1 if isinstance(v, (int, float)) and not isinstance(v, bool) else
                  (not v if isinstance(v, bool) else (v + " extra words here" if isinstance(v, str) else None)))
        break
    return out


def _calls_cases(expected: list[tuple[str, dict[str, Any]]], tools: list[str]) -> list[tuple[str, Output]]:
    """Variants of a reply to a row that expects ``expected`` calls, in any order."""
    def calls(pairs: list[tuple[str, Any]]) -> Output:
        return [call(n, a, i + 1) for i, (n, a) in enumerate(pairs)]

    name, args = expected[0]
    other = next((t for t in tools if t != name), None)
    str_key = next((k for k, v in args.items() if isinstance(v, str)), None)
    long_key = next((k for k, v in args.items() if isinstance(v, str) and len(v.split()) >= 5), None)
    cases: list[tuple[str, Output]] = [
        ("gold", calls(expected)),
        ("gold_reversed", calls(list(reversed(expected)))),
        ("gold_with_prose", [message("Let me look that up."), *calls(expected)]),
        ("gold_keys_reordered", calls([(n, dict(reversed(list(a.items())))) for n, a in expected])),
        ("wrong_value", calls([(name, _perturb(args)), *expected[1:]])),
        ("missing_argument", calls([(name, dict(list(args.items())[:-1])), *expected[1:]]) if args else None),
        ("extra_argument", calls([(name, {**args, "unexpected_argument": 1}), *expected[1:]])),
        ("gold_plus_duplicate", calls([*expected, expected[0]])),
        ("only_first_of_several", calls(expected[:1]) if len(expected) > 1 else None),
        ("arguments_not_json", [call(name, '{"' + next(iter(args), "a") + '": ')]),
        ("number_as_string", calls([(name, {k: str(v) if isinstance(v, (int, float)) and not isinstance(v, bool)
                                            else v for k, v in args.items()}), *expected[1:]])
         if any(isinstance(v, (int, float)) and not isinstance(v, bool) for v in args.values()) else None),
        ("string_case_changed", calls([(name, {**args, str_key: str(args[str_key]).swapcase()}), *expected[1:]])
         if str_key else None),
        ("no_call_text", text(f"I would call {name} now.")),
        ("empty", text("")),
        ("wrong_tool", calls([(other, args), *expected[1:]]) if other else None),
        ("gold_plus_other_tool", calls([*expected, (other, {})]) if other else None),
        # the JSON type of a number (2 sent as 2.0), text after the calls, arguments that are no object
        ("int_as_float", calls([(name, {k: float(v) if isinstance(v, int) and not isinstance(v, bool) else v
                                        for k, v in args.items()}), *expected[1:]])
         if any(isinstance(v, int) and not isinstance(v, bool) for v in args.values()) else None),
        ("gold_then_text", [*calls(expected), message("Done.")]),
        ("arguments_empty_text", [call(name, "")]),
        ("arguments_a_list", [call(name, "[]")]),
        ("words_dropped", calls([(name, {**args, long_key: " ".join(str(args[long_key]).split()[:2])}),
                                 *expected[1:]]) if long_key else None),
    ]
    return [(n, out) for n, out in cases if out is not None]


def xlam_cases(row: dict[str, Any]) -> list[tuple[str, Output]]:
    return _calls_cases([(c["name"], _args(c["arguments"])) for c in row["expected_answers"]], _tool_names(row))


def multireward_cases(row: dict[str, Any]) -> list[tuple[str, Output]]:
    return _calls_cases([(row["expected_call"]["name"], _args(row["expected_call"]["arguments"]))], _tool_names(row))


def single_step_cases(row: dict[str, Any]) -> list[tuple[str, Output]]:
    action = row["expected_action"]
    action = json.loads(action) if isinstance(action, str) else action
    tools = _tool_names(row)
    if action["type"] == "message":
        return [("message", text(action["content"])), ("other_message", text("Could you tell me more?")),
                ("empty", text("")), ("call_instead", [call(tools[0], {}) ])]
    pairs = [(c["name"], _args(c["arguments"])) for c in action.get("calls") or [action]]
    return _calls_cases(pairs, tools)


# ---- reasoning-gym, BunsenBench, PolyMath -----------------------------------------------------------------

def reasoning_gym_cases(row: dict[str, Any]) -> list[tuple[str, Output]]:
    a = str(row["answer"])
    clauses = a.rstrip(".").split(", and ")
    flipped = a.replace("is a ", "is_A ").replace("is an ", "is_AN ")
    wrong = ", and ".join(reversed(clauses)) + "." if len(clauses) == 2 else a + " not"
    names = [c.split(" is ")[0] for c in clauses]
    if len(names) == 2:  # swap who is what: the other assignment, a wrong answer
        wrong = a.replace(names[0], "\0").replace(names[1], names[0]).replace("\0", names[1])
    forms = {
        "answer_tags": f"<answer>{a}</answer>",
        "reasoning_then_tags": f"Let me work through the statements.\n\n<answer>{a}</answer>",
        "tags_spaced": f"<answer>\n{a}\n</answer>",
        "tags_upper": f"<ANSWER>{a}</ANSWER>",
        "clauses_reordered": f"<answer>{', and '.join(reversed(clauses))}.</answer>",
        "lowercase": f"<answer>{a.lower()}</answer>",
        "no_period": f"<answer>{a.rstrip('.')}</answer>",
        "no_tags": a,
        "boxed": f"\\boxed{{{a}}}",
        "last_tags_win": f"<answer>{wrong}</answer> Wait, no. <answer>{a}</answer>",
        "last_tags_wrong": f"<answer>{a}</answer> Wait, no. <answer>{wrong}</answer>",
        "wrong": f"<answer>{wrong}</answer>",
        "mangled": f"<answer>{flipped}</answer>",
        "unclosed": f"<answer>{a}",
        "empty_tags": "<answer></answer>",
        "empty": "",
    }
    return [(k, text(v)) for k, v in forms.items()]


_SUBSCRIPT = str.maketrans("0123456789", "₀₁₂₃₄₅₆₇₈₉")


def bunsen_cases(row: dict[str, Any]) -> list[tuple[str, Output]]:
    options = {k: v for entry in row["options"] for k, v in entry.items()}
    g = str(row["expected_answer"]).strip().upper()
    w = next(k for k in options if k != g)
    t, wt = options[g], options[w]
    forms = {
        "choice_text": f"<choice>{t}</choice>", "choice_text_spaced": f"<choice> {t} </choice>",
        "reasoning_then_choice": f"Thinking about it, {wt} is unlikely.\n<choice>{t}</choice>",
        "choice_letter": f"<choice>{g}</choice>", "choice_lower": f"<choice>{t.lower()}</choice>",
        "choice_wrong": f"<choice>{wt}</choice>", "answer_colon_text": f"Answer: {t}",
        "answer_colon_letter": f"Answer: {g}", "boxed_letter": f"\\boxed{{{g}}}", "boxed_text": f"\\boxed{{{t}}}",
        "answer_tag": f"<answer>{t}</answer>", "two_choices": f"<choice>{wt}</choice>\n<choice>{t}</choice>",
        "plain_text": t, "letter_alone": g, "the_answer_is": f"The answer is {t}.",
        "refusal": "I cannot help with that.", "empty": "", "unclosed": f"<choice>{t}",
        # more of the forms NeMo Gym's BunsenBench reader takes, and where it looks first
        "answer_bold": f"**Answer:** {t}", "answer_lower_letter": f"Answer: {g.lower()}",
        "option_word": f"I choose option {g}", "label_text": f"{g}) {t}", "final_answer_tag":
        f"<final_answer>{t}</final_answer>", "choice_quoted": f"<choice>\"{t}\"</choice>",
        "boxed_text_wrapper": f"\\boxed{{\\text{{{t}}}}}",
        "choice_subscripts": f"<choice>{t.translate(_SUBSCRIPT)}</choice>",
        "restated_choices": f"<choices>\n<choice>{wt}</choice>\n</choices>\nAnswer: {t}",
        "answer_then_choice": f"Answer: {wt}\n<choice>{t}</choice>", "letter_first_line": f"{g}\nBecause of it.",
    }
    return [(k, text(v)) for k, v in forms.items()]


def polymath_cases(row: dict[str, Any]) -> list[tuple[str, Output]]:
    x = str(row["expected_answer"]).strip()
    other = str(int(x) + 1) if x.lstrip("-").isdigit() else "7"  # a wrong answer
    forms = {"boxed": f"\\boxed{{{x}}}", "boxed_sentence": f"So the result is $\\boxed{{{x}}}$.",
             "boxed_decimal": f"\\boxed{{{x}.0}}", "boxed_wrong": f"\\boxed{{{other}}}",
             "boxed_equation": f"\\boxed{{x = {x}}}", "last_box_wins": f"\\boxed{{{other}}} no: \\boxed{{{x}}}",
             "no_box": f"Answer: {x}", "boxed_text": f"\\boxed{{\\text{{{x}}}}}", "empty_box": "\\boxed{}",
             "unclosed_box": f"\\boxed{{{x}", "empty": ""}
    return [(k, text(v)) for k, v in forms.items()]
