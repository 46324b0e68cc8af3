"""utils.py: the functions of triviaqa_tprun.yaml, as `tprun eval triviaqa --shots 5` does it (docs/EVAL.md).

The first SHOTS records of the data file are the shots (answer: answer.value) and are not scored; the
answer is the generated text up to the first newline, stripped; exact match is the official TriviaQA
script's (triviaqa_evaluation.py) normalized comparison, best over answer.normalized_aliases,
answer.aliases and answer.value.
"""
import json
import os
import re
import string

SHOTS = 5
DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "fixtures", "triviaqa",
                    "validation_sample.hf_layout.jsonl")


def shots():
    with open(DATA, encoding="utf-8") as f:
        records = [json.loads(line) for line in f if line.strip()]
    return records[:SHOTS]


def questions(dataset):
    return dataset.select(range(SHOTS, len(dataset)))


def normalize(s):
    """triviaqa_evaluation.py normalize_answer."""
    s = s.replace("_", " ").lower()
    exclude = set(string.punctuation + "‘’´`")
    s = "".join(" " if ch in exclude else ch for ch in s)
    s = re.sub(r"\b(a|an|the)\b", " ", s)
    return " ".join(s.split()).strip()


def process_results(doc, results):
    prediction = normalize(results[0].split("\n")[0].strip())
    answer = doc["answer"]
    truths = {normalize(t) for t in answer["normalized_aliases"] + answer["aliases"] + [answer["value"]]}
    return {"exact_match": float(prediction in truths)}
