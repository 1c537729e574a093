"""A deterministic corpus of review- and Q&A-like passages, so the example needs no download.

``python corpus.py OUT.jsonl [--count N] [--seed S]`` writes ``N`` JSON Lines records
``{"id": "p-0000001", "text": "..."}``. The same count and seed always give the
same bytes (a seeded ``random.Random`` draws from fixed vocabularies; nothing
reads the clock or the machine), so a rerun, a test and the verifier agree.

Three kinds of passage, drawn in a seeded mix: product reviews (a product, a
star rating, two to five sentences about its aspects), questions with an
answer (a topic, a question, an answer of one to four sentences), and short
support-forum posts. Lengths vary from one line to a paragraph, as real
corpora do, which matters for embedding throughput (padding per batch).
"""

from __future__ import annotations

import argparse
import json
import random
from collections.abc import Iterator
from pathlib import Path

DEFAULT_COUNT = 20_000
DEFAULT_SEED = 20261201

PRODUCTS = [
    "wireless earbuds",
    "espresso machine",
    "hiking boots",
    "standing desk",
    "robot vacuum",
    "mechanical keyboard",
    "air fryer",
    "e-reader",
    "running watch",
    "office chair",
    "portable charger",
    "electric kettle",
    "noise-cancelling headphones",
    "tent",
    "blender",
    "4K monitor",
    "backpack",
    "smart thermostat",
    "cast-iron skillet",
    "yoga mat",
    "webcam",
    "graphics tablet",
    "rice cooker",
    "bike helmet",
    "dehumidifier",
]
ASPECTS = [
    "battery life",
    "build quality",
    "price",
    "customer service",
    "setup",
    "noise level",
    "comfort",
    "weight",
    "design",
    "durability",
    "instructions",
    "packaging",
    "app",
    "warranty",
    "size",
    "performance",
    "cleaning",
    "sound",
    "screen",
    "grip",
]
GOOD = [
    "is excellent",
    "exceeded my expectations",
    "is better than the previous model",
    "works exactly as described",
    "is surprisingly good for the price",
    "feels premium",
    "has held up well after months of daily use",
    "is the best I have tried",
]
BAD = [
    "is disappointing",
    "stopped working after two weeks",
    "is worse than advertised",
    "feels cheap",
    "could be much better",
    "is a real problem",
    "made me want a refund",
    "is noticeably worse than the competition",
]
OPENERS = [
    "I bought this {product} for my {person}.",
    "After a month with the {product}, here is my take.",
    "Ordered the {product} on sale.",
    "This is my second {product} from this brand.",
    "Replaced my old {product} with this one.",
    "Got the {product} as a gift.",
]
PERSONS = ["partner", "daughter", "son", "office", "parents", "studio", "dorm room", "van"]
CLOSERS = [
    "Would buy again.",
    "Not recommended.",
    "Four stars overall.",
    "Returned it.",
    "Recommended for beginners.",
    "Fine if you can live with the flaws.",
    "Worth every penny.",
]
TOPICS = [
    "sourdough baking",
    "home networking",
    "container gardening",
    "marathon training",
    "Python packaging",
    "bird watching",
    "personal finance",
    "watercolour painting",
    "solar panels",
    "bread machines",
    "learning Spanish",
    "cycling in winter",
    "aquarium care",
    "3D printing",
    "composting",
    "chess openings",
]
QUESTIONS = [
    "What is the best way to get started with {topic}?",
    "How much time per week does {topic} really take?",
    "Is getting into {topic} expensive?",
    "What mistakes do beginners make with {topic}?",
    "Which tools do I need for {topic}?",
    "Can {topic} be done in a small apartment?",
    "How do I know if I am improving at {topic}?",
]
ANSWER_PARTS = [
    "Start small and keep notes on what you change each time.",
    "Most people overspend on equipment in the first month.",
    "A local club or forum will save you a lot of trial and error.",
    "Consistency matters far more than intensity.",
    "Budget roughly twice what you expect for the basics.",
    "Read the manual before you assume something is broken.",
    "Pick one reliable reference and follow it for a few weeks.",
    "Measure twice, and write down the results.",
    "Temperature and timing explain most of the failures you will see.",
    "Expect the first attempts to go wrong; that is how everyone learns.",
]
ISSUES = [
    "keeps disconnecting",
    "shows an error on startup",
    "will not charge",
    "makes a clicking sound",
    "is stuck on the update screen",
    "does not pair with my phone",
    "runs very hot",
]
FIXES = [
    "A factory reset fixed it for me.",
    "Updating the firmware solved it.",
    "Support sent a replacement within a week.",
    "Try a different cable first.",
    "Mine turned out to be a faulty outlet.",
    "No fix yet, still waiting on support.",
]


def _review(rng: random.Random) -> str:
    product = rng.choice(PRODUCTS)
    stars = rng.randint(1, 5)
    sentences = [rng.choice(OPENERS).format(product=product, person=rng.choice(PERSONS))]
    for aspect in rng.sample(ASPECTS, rng.randint(1, 4)):
        verdict = rng.choice(GOOD if rng.random() < stars / 5.5 else BAD)
        sentences.append(f"The {aspect} {verdict}.")
    sentences.append(rng.choice(CLOSERS))
    return f"{stars}/5 stars. " + " ".join(sentences)


def _qa(rng: random.Random) -> str:
    topic = rng.choice(TOPICS)
    question = rng.choice(QUESTIONS).format(topic=topic)
    answer = " ".join(rng.sample(ANSWER_PARTS, rng.randint(1, 4)))
    return f"Q: {question} A: {answer}"


def _support(rng: random.Random) -> str:
    product = rng.choice(PRODUCTS)
    since = f"{rng.randint(2, 30)} {rng.choice(['days', 'weeks', 'months'])}"
    text = f"My {product} (model {rng.choice('ABCDEFGH')}{rng.randint(100, 999)}) {rng.choice(ISSUES)} after {since}."
    if rng.random() < 0.7:
        text += f" Reply: {rng.choice(FIXES)}"
    return text


KINDS = ((_review, 0.5), (_qa, 0.35), (_support, 0.15))


def passages(count: int = DEFAULT_COUNT, seed: int = DEFAULT_SEED) -> Iterator[dict[str, str]]:
    """``count`` records ``{"id", "text"}``, the same for the same ``count`` and ``seed``."""
    rng = random.Random(seed)
    makers = [maker for maker, _ in KINDS]
    weights = [weight for _, weight in KINDS]
    for index in range(count):
        (maker,) = rng.choices(makers, weights)
        yield {"id": f"p-{index:07d}", "text": maker(rng)}


def write_corpus(path: Path, count: int = DEFAULT_COUNT, seed: int = DEFAULT_SEED) -> Path:
    """Write the corpus to ``path`` (atomically: a partial file never has the final name)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    with partial.open("w", encoding="utf-8") as handle:
        for record in passages(count, seed):
            handle.write(json.dumps(record) + "\n")
    partial.replace(path)
    return path


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="the JSONL file to write")
    parser.add_argument(
        "--count", type=int, default=DEFAULT_COUNT, help="passages (default 20,000)"
    )
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    args = parser.parse_args(argv)
    if args.count < 1:
        parser.error(f"--count must be at least 1, got {args.count}")
    write_corpus(args.out, args.count, args.seed)
    print(f"wrote {args.count} passages to {args.out}")


if __name__ == "__main__":
    main()
