"""The LLM benchmark's prompts: short, everyday questions, one user message each, as aiperf's custom
single-turn dataset (JSONL, one `{"text": ..., "output_length": ...}` a line).

Greedy decoding answers each the same way every run. SmolLM2-135M-Instruct ends every answer to these at
its end-of-turn token, after 8 to 238 tokens (72 on average, end of turn included): the output lengths
are the model's own, and `output_length` (sent as max_completion_tokens) is only a cap. Some questions
ask for brevity, as people do: an open question to a 135 M model, greedy, often runs on past any cap.
"""

from __future__ import annotations

import json
from pathlib import Path

QUESTIONS = (
    "What is the capital of France?",
    "In two sentences, how do I boil an egg?",
    "Why is the sky blue? Answer in one sentence.",
    "Suggest a name for a pet goldfish.",
    "How many days are there in a leap year?",
    "List three things to pack for a day at the beach.",
    "What is photosynthesis, in one sentence?",
    "Briefly, what is the difference between weather and climate?",
    "How do I make a cup of tea? Keep it short.",
    "What is the chemical symbol for gold?",
    "How far is the Moon from the Earth?",
    "Name three fruits that are red.",
    "How do I get a coffee stain out of a shirt? Be brief.",
    "What is the opposite of 'cold'?",
    "What is the tallest mountain in the world?",
    "Give me two ways to spend less on groceries.",
    "In one sentence, what does a computer's CPU do?",
    "Which planet is closest to the Sun?",
    "At what temperature does water boil?",
    "How do plants take up water?",
    "What is the plural of 'mouse'?",
    "What is the largest ocean on Earth?",
    "How should a beginner start running? Answer briefly.",
    "What does the word 'ephemeral' mean?",
    "Why do leaves change colour in the autumn?",
    "How many legs does a spider have?",
    "What is the main ingredient of guacamole?",
    "In a few sentences, how do vaccines work?",
    "How fast does light travel?",
    "In one sentence, why do cats purr?",
    "Write a one-line message asking my manager for Friday off.",
    "What causes rainbows?",
    "Is a virus the same as a bacterium?",
    "How long should I cook spaghetti?",
    "Name a famous composer of classical music.",
    "Tell me a joke about computers.",
    "How do airplanes stay in the air? Explain simply.",
    "What is one good way to learn a new language?",
    "Why is exercise good for you?",
    "In one sentence, what is a healthy breakfast?",
    "Which animal is known as the king of the jungle?",
    "What is the Pythagorean theorem?",
    "Summarise the story of Cinderella in two sentences.",
    "How does a refrigerator keep food cold?",
    "What is the currency of Japan?",
    "Who painted the Mona Lisa?",
    "What is the difference between a frog and a toad?",
    "Why do we have seasons?",
    "Who was the first person to walk on the Moon?",
    "How many continents are there?",
    "What is inflation, in simple words?",
    "What does a thermometer measure?",
    "Suggest a quick dinner for tonight.",
    "What is 15 multiplied by 4?",
    "Write a short sentence describing the sea.",
    "What is the longest river in Africa?",
    "Explain the internet to a child in two sentences.",
    "How do you say 'thank you' in French?",
    "What gas do humans breathe out?",
    "What is a synonym for 'happy'?",
    "Name one benefit of drinking water.",
    "What are the three primary colours?",
    "Give me one tip for a job interview.",
    "What year did the Second World War end?",
)


def write_dataset(path: Path, max_tokens: int) -> Path:
    """The questions as aiperf's single-turn dataset, each capped at `max_tokens` output tokens."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = (json.dumps({"text": q, "output_length": max_tokens}) for q in QUESTIONS)
    path.write_text("\n".join(lines) + "\n")
    return path
