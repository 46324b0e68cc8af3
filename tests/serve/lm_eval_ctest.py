#!/usr/bin/env python3
"""lm_eval_ctest.py: lm-evaluation-harness (`lm_eval --model local-completions` and `local-chat-completions`)
against `tprun serve` (ctest lm_eval).

Converts tests/fixtures/stories260K at tp 2, starts `tprun serve` on the CPU backend on a free port (with a
ChatML chat template: the model has none) and runs two local tasks (no dataset download):

  (a) triviaqa_tprun (scripts/lm_eval_triviaqa/): the prompts of `tprun eval triviaqa --shots 5` on the
      committed TriviaQA sample. Checks: lm_eval's exact_match equals the summary's exact_match of
      `tprun eval triviaqa` on the same file; for each of the 27 questions, lm_eval's prompt is the text
      tprun builds (docs/EVAL.md) and its generation equals the prediction file's `output`.
  (b) tiny_mc (scripts/lm_eval_tiny_mc/): 4 questions x 3 choices by log-likelihood. Checks: each of the 12
      log-likelihoods lm_eval reports equals, within 1e-4, the sum over the continuation's tokens of
      log_softmax(`tprun logits --ids` of each prefix) at tp 1, for the token ids lm_eval sent (its own
      context / continuation split, computed with lm_eval's code), and acc is 1.0.
  (c) triviaqa_tprun again with `--model local-chat-completions --apply_chat_template --num_fewshot 1` (the
      shot as an earlier turn of the conversation; 5 would exceed stories260K's 512 positions): for each question, lm_eval's generation equals `tprun generate --input` of a
      record with the messages lm_eval sent (the same template, greedy, stop "\n", 10 tokens).

stories260K answers none of the TriviaQA questions right, so both exact matches of (a) are 0; the task's
metric is also checked against tprun eval's scorer on crafted answers (right in some spellings, wrong in
others), rescored by `tprun eval triviaqa` from a predictions file whose questions are all done.

lm_eval comes from the venv scripts/install_deps.sh makes (~/.cache/tpshard/lm-eval-venv, lm-eval[api] and
transformers for the tokenizer of (b)), or $LM_EVAL_VENV. Exit 0 when every check passes; 77 (ctest:
skipped) when lm_eval or transformers is not installed there.

    python3 tests/serve/lm_eval_ctest.py --bin-dir build/bin --work-dir /tmp/lm_eval
"""
import argparse
import glob
import json
import math
import os
import shutil
import subprocess
import sys
import time

from serve_ctest_util import Server, write_chatml

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURE = os.path.join(REPO, "tests/fixtures/stories260K")
TRIVIAQA = os.path.join(REPO, "tests/fixtures/triviaqa/validation_sample.hf_layout.jsonl")
SHOTS = 5

# Run with the venv's Python: lm_eval's own context / continuation token split of each (context,
# continuation) pair read from stdin, for the tokenizer and model_args of the tiny_mc run.
ENCODE_PAIRS = """
import json, sys
from lm_eval.models.openai_completions import LocalCompletionsAPI
m = LocalCompletionsAPI(model="stories260K", base_url=sys.argv[1], tokenizer=sys.argv[2], tokenized_requests=True)
print(json.dumps([list(map(list, m._encode_pair(c, x))) for c, x in json.load(sys.stdin)]))
"""


def log_softmax_at(logits, token):
    top = max(logits)
    return logits[token] - top - math.log(sum(math.exp(v - top) for v in logits))


def tprun_prompt(shots, question):
    """tprun eval triviaqa's prompt (eval/fewshot_prompt.cpp)."""
    p = "".join(f"Question: {s['question']}\nAnswer: {s['answer']['value']}\n\n" for s in shots)
    return p + f"Question: {question}\nAnswer:"


def samples_of(out_dir, task):
    files = glob.glob(os.path.join(out_dir, "**", f"samples_{task}_*.jsonl"), recursive=True)
    if len(files) != 1:
        raise RuntimeError(f"expected one samples file of {task} under {out_dir}, found {files}")
    with open(files[0]) as f:
        return [json.loads(line) for line in f if line.strip()]


def results_of(out_dir, task):
    files = glob.glob(os.path.join(out_dir, "**", "results_*.json"), recursive=True)
    if len(files) != 1:
        raise RuntimeError(f"expected one results file under {out_dir}, found {files}")
    with open(files[0]) as f:
        return json.load(f)["results"][task]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin-dir", required=True)
    ap.add_argument("--work-dir", required=True)
    args = ap.parse_args()
    t0 = time.time()
    venv = os.environ.get("LM_EVAL_VENV", os.path.expanduser("~/.cache/tpshard/lm-eval-venv"))
    lm_eval, vpython = os.path.join(venv, "bin", "lm_eval"), os.path.join(venv, "bin", "python")
    if not os.path.exists(lm_eval) or subprocess.run([vpython, "-c", "import lm_eval, transformers"],
                                                     capture_output=True).returncode != 0:
        print(f"SKIPPED: lm-evaluation-harness (lm_eval and transformers) is not installed in {venv} "
              "(scripts/install_deps.sh installs it)")
        return 77
    shutil.rmtree(args.work_dir, ignore_errors=True)
    os.makedirs(args.work_dir)
    tprun = os.path.join(args.bin_dir, "tprun")
    model = os.path.join(args.work_dir, "stories260K")
    subprocess.run([os.path.join(args.bin_dir, "tpshard"), "convert", FIXTURE, "-o", model, "--tp", "1,2", "-q"], check=True)
    common = ["--device", "cpu", "--threads", "1"]
    fails = 0

    def check(ok, what):
        nonlocal fails
        print(("PASS " if ok else "FAIL ") + what, flush=True)
        fails += 0 if ok else 1

    # tprun's own answers to the TriviaQA sample (before the server starts: the two do not share the cores).
    preds = os.path.join(args.work_dir, "tprun_preds.jsonl")
    subprocess.run([tprun, model, "--tp", "2", *common, "eval", "triviaqa", "--data", TRIVIAQA, "--shots", str(SHOTS),
                    "--output", preds, "--summary", preds + ".summary.json"], check=True, stdout=subprocess.DEVNULL)
    with open(preds + ".summary.json") as f:
        tprun_em = json.load(f)["exact_match"]
    with open(preds) as f:
        tprun_out = {p["id"]: p for p in map(json.loads, f)}

    template = write_chatml(args.work_dir)
    env = dict(os.environ, HF_DATASETS_OFFLINE="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               HF_HOME=os.path.join(args.work_dir, "hf_home"), TOKENIZERS_PARALLELISM="false")
    try:
        server = Server(tprun, model, args.work_dir, ["--tp", "2", *common, "--max-batch", "4"],
                        ["--served-model-name", "stories260K", "--chat-template", template])
    except RuntimeError as e:
        print(f"FAIL: {e}")
        return 1
    url = f"{server.url}/v1/completions"
    with server:
        def run_lm_eval(task, include, model_args, lm="local-completions", base_url=url, extra=(), tag=""):
            out = os.path.join(args.work_dir, task + tag)
            cmd = [lm_eval, "run", "--model", lm, "--include_path", os.path.join(REPO, include),
                   "--tasks", task, "--model_args", f"model=stories260K,base_url={base_url},num_concurrent=4,max_retries=1,"
                   + model_args, "--output_path", out, "--log_samples", *extra]
            with open(out + ".log", "w") as lf:
                r = subprocess.run(cmd, cwd=REPO, env=env, stdout=lf, stderr=subprocess.STDOUT, timeout=300)
            if r.returncode != 0:
                with open(out + ".log") as lf:
                    sys.stdout.write(lf.read()[-4000:])
                raise RuntimeError(f"lm_eval {task} exited {r.returncode} (log {out}.log)")
            return out

        # (a) generation: same prompts, same greedy answers, same exact match.
        out = run_lm_eval("triviaqa_tprun", "scripts/lm_eval_triviaqa", "tokenizer_backend=None,tokenized_requests=False")
        em = results_of(out, "triviaqa_tprun")["exact_match,none"]
        samples = samples_of(out, "triviaqa_tprun")
        with open(TRIVIAQA) as f:
            records = [json.loads(line) for line in f if line.strip()]
        check(len(samples) == len(records) - SHOTS == len(tprun_out),
              f"triviaqa_tprun: {len(samples)} questions scored by lm_eval, {len(tprun_out)} by tprun eval")
        same_prompt = same_output = 0
        for s in samples:
            doc = s["doc"]
            want = tprun_out.get(doc["question_id"], {})
            prompt = s["arguments"]["gen_args_0"]["arg_0"]
            same_prompt += prompt == tprun_prompt(records[:SHOTS], doc["question"])
            got = s["resps"][0][0]
            if got == want.get("output"):
                same_output += 1
            else:
                print(f"  {doc['question_id']}: lm_eval {got!r} != tprun {want.get('output')!r}")
        check(same_prompt == len(samples), f"triviaqa_tprun: {same_prompt}/{len(samples)} prompts equal tprun eval's")
        check(same_output == len(samples), f"triviaqa_tprun: {same_output}/{len(samples)} generations equal tprun eval's")
        check(abs(em - tprun_em) < 1e-12, f"triviaqa_tprun: exact_match lm_eval {em} == tprun eval {tprun_em}")
        # stories260K answers no question right, so both scores above are 0. The task's metric against tprun's
        # scorer on answers that are right in some spellings and wrong in others: tprun eval rescoring a
        # predictions file whose every question is already done (no generation) vs utils.process_results.
        sys.path.insert(0, os.path.join(REPO, "scripts/lm_eval_triviaqa"))
        import utils as task_utils  # noqa: E402 (the task's own functions: json, re, string only)
        by_id = {r["question_id"]: r for r in records}
        crafted = os.path.join(args.work_dir, "crafted_preds.jsonl")
        task_em = []
        with open(crafted, "w") as f:
            for i, (qid, p) in enumerate(tprun_out.items()):
                a = by_id[qid]["answer"]
                answer = [a["aliases"][-1].upper(), "The " + a["value"] + "!", "Paris", a["value"] + " x",
                          "  " + a["value"].replace(" ", "_")][i % 5]
                output = " " + answer + "\nQuestion: next"
                p = dict(p, output=output, prediction=output.split("\n")[0].strip())
                f.write(json.dumps(p) + "\n")
                task_em.append(task_utils.process_results(by_id[qid], [output])["exact_match"])
        subprocess.run([tprun, model, "--tp", "2", *common, "eval", "triviaqa", "--data", TRIVIAQA, "--shots",
                        str(SHOTS), "--output", crafted, "--summary", crafted + ".summary.json"], check=True,
                       stdout=subprocess.DEVNULL)
        with open(crafted + ".summary.json") as f:
            crafted_em = json.load(f)["exact_match"]
        mean = sum(task_em) / len(task_em)
        check(0 < crafted_em < 1 and abs(mean - crafted_em) < 1e-12,
              f"triviaqa_tprun metric == tprun eval's scorer on {len(task_em)} crafted answers: {mean} == {crafted_em}")

        # (b) log-likelihood: lm_eval's values equal tprun logits' for the ids it sent.
        out = run_lm_eval("tiny_mc", "scripts/lm_eval_tiny_mc", f"tokenizer={FIXTURE},tokenized_requests=True")
        acc = results_of(out, "tiny_mc")["acc,none"]
        pairs, lls = [], []
        for s in samples_of(out, "tiny_mc"):
            for k in range(len(s["resps"])):
                a = s["arguments"][f"gen_args_{k}"]
                pairs.append([a["arg_0"], a["arg_1"]])
                lls.append(float(s["resps"][k][0][0]))  # the samples file writes numbers as strings
        enc = subprocess.run([vpython, "-c", ENCODE_PAIRS, url, FIXTURE], input=json.dumps(pairs), env=env,
                             capture_output=True, text=True, check=True)
        worst, n = 0.0, 0
        for (ctx, cont), ll in zip(json.loads(enc.stdout), lls):
            want = 0.0
            for k in range(len(cont)):
                ids = ",".join(map(str, ctx + cont[:k]))
                r = subprocess.run([tprun, model, "--tp", "1", *common, "logits", "--ids", ids],
                                   capture_output=True, text=True, check=True)
                want += log_softmax_at(json.loads(r.stdout)["logits"], cont[k])
            worst = max(worst, abs(ll - want))
            n += 1
        check(n == 12 and worst <= 1e-4,
              f"tiny_mc: {n} log-likelihoods equal tprun logits' within 1e-4 (worst difference {worst:.2e})")
        check(acc == 1.0, f"tiny_mc: acc {acc}")

        # (c) chat: lm_eval's local-chat-completions, one shot as an earlier turn; each generation equals
        # tprun generate --input of the messages it sent.
        out = run_lm_eval("triviaqa_tprun", "scripts/lm_eval_triviaqa", "tokenizer_backend=None",
                          lm="local-chat-completions", base_url=f"{server.url}/v1/chat/completions",
                          extra=["--apply_chat_template", "--num_fewshot", "1"], tag="_chat")  # 5 shots in ChatML exceed 512 positions
        samples = samples_of(out, "triviaqa_tprun")
        records = os.path.join(args.work_dir, "chat_records.jsonl")
        n_turns = set()
        with open(records, "w") as f:
            for s in samples:
                messages = s["arguments"]["gen_args_0"]["arg_0"]
                if isinstance(messages, list) and len(messages) == 1 and isinstance(messages[0], str):
                    messages = messages[0]  # the samples file holds the chat history as a JSON string
                messages = json.loads(messages) if isinstance(messages, str) else messages
                n_turns.add(len(messages))
                f.write(json.dumps({"id": s["doc"]["question_id"], "messages": messages, "stop": "\n"}) + "\n")
        chat_out = os.path.join(args.work_dir, "chat_out.jsonl")
        subprocess.run([tprun, model, "--tp", "2", *common, "generate", "--input", records, "--output", chat_out,
                        "--chat-template", template, "--max-new-tokens", "10", "--temperature", "0"], check=True,
                       stdout=subprocess.DEVNULL)
        with open(chat_out) as f:
            want = {r["id"]: r["text"] for r in map(json.loads, f)}
        same = 0
        for s in samples:
            got, exp = s["resps"][0][0], want.get(s["doc"]["question_id"])
            same += got == exp
            if got != exp:
                print(f"  {s['doc']['question_id']}: lm_eval chat {got!r} != tprun generate {exp!r}")
        check(len(samples) == len(want) == 27 and same == len(samples) and n_turns == {3},
              f"triviaqa_tprun chat: {same}/{len(samples)} generations equal tprun generate's of the same messages "
              f"(turns per conversation: {sorted(n_turns)})")
        print(f"lm_eval ctest: {time.time() - t0:.1f} s", flush=True)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
