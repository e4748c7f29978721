"""One task with the OpenHands SDK's own default coding agent, as a program: what ``OpenHandsAdapter`` runs.

Executed by the Python of the OpenHands virtual environment (Python 3.12, ``openhands-sdk`` and
``openhands-tools`` from PyPI), never imported by Palaestra: it imports nothing of Palaestra and only the
SDK's public API. The agent is the SDK's ``get_default_agent`` in CLI mode (terminal, file editor, task
tracker; no browser), its LLM an OpenAI-compatible endpoint (the rollout's, through litellm) with no
retries of its own (retries belong to Palaestra's model layer). The conversation runs in the working
directory until the agent calls ``finish`` or reaches ``--max-steps``; its final message is written to
``--final-file`` (stdout carries the SDK's own log lines).
"""

from __future__ import annotations

import argparse
import os


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--base-url", required=True, help="the OpenAI-compatible endpoint, with /v1")
    parser.add_argument("--model", required=True)
    parser.add_argument("--api-key", default="palaestra-no-key")
    parser.add_argument("--max-steps", type=int, default=16)
    parser.add_argument("--final-file", required=True)
    parser.add_argument("prompt")
    args = parser.parse_args()

    from openhands.sdk import LLM, Conversation
    from openhands.sdk.conversation.response_utils import get_agent_final_response
    from openhands.tools.preset.default import get_default_agent

    llm = LLM(model=f"openai/{args.model}", base_url=args.base_url, api_key=args.api_key, usage_id="agent",
              num_retries=0)
    agent = get_default_agent(llm, cli_mode=True)
    conversation = Conversation(agent=agent, workspace=os.getcwd(), max_iteration_per_run=args.max_steps,
                                visualizer=None)
    conversation.send_message(args.prompt)
    conversation.run()
    with open(args.final_file, "w", encoding="utf-8") as fh:
        fh.write(get_agent_final_response(conversation.state.events))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
