"""kwiden's greedy and beam search with a repetition penalty against transformers' `generate` on the same
saved GPT-2 folders: the same continuations, prompt by prompt (a beam search's whole returned set).

transformers runs in another Python (it needs torch):

    python3 -m venv /tmp/hfenv && /tmp/hfenv/bin/pip install torch transformers
    python benchmarks/generation_parity.py --transformers-python /tmp/hfenv/bin/python

Random GPTs 64 x 2 at three weight scales, prompts of 12 tokens drawn from 40 ids (so each repeats some),
penalties 1.3, 2.0 and 0.7 (a reward), greedy and beams of 3, 24 new tokens, no end token.
"""

import argparse
import json
import subprocess
import tempfile

import numpy as np
from generation import decoder

import kwiden
from kwiden.generation import Search, generate_ids
from kwiden.testing import randomize_weights

TRANSFORMERS = """
import json, sys, torch, transformers
folder, prompts, new, penalty, beams = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5])
model = transformers.AutoModelForCausalLM.from_pretrained(folder).eval()
ids = torch.tensor(prompts)
with torch.no_grad():
    out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new, min_new_tokens=new,
                         do_sample=False, num_beams=beams, num_return_sequences=beams, early_stopping=True,
                         length_penalty=1.0, repetition_penalty=penalty, pad_token_id=0, eos_token_id=None)
print(json.dumps(out[:, ids.shape[1]:].tolist()))
"""  # noqa: E501


def theirs(python, folder, prompts, new, penalty, beams):
    done = subprocess.run([python, "-c", TRANSFORMERS, folder, json.dumps(prompts), str(new), str(penalty),
                           str(beams)], capture_output=True, text=True, check=True)  # fmt: skip
    found = json.loads(done.stdout.splitlines()[-1])
    return [found[i * beams : (i + 1) * beams] for i in range(len(prompts))]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--transformers-python", required=True, help="a Python with torch and transformers")
    parser.add_argument("--new", type=int, default=24, help="tokens generated a row")
    args = parser.parse_args()
    print("| weights' std | penalty | search | prompts with transformers' continuations |\n|---|---|---|---|")
    same = total = 0
    for seed, std in enumerate((0.05, 0.2, 0.5)):
        model = randomize_weights(decoder("gpt", 64, 2, 12 + args.new), seed=seed, std=std)
        prompts = np.random.default_rng(seed).integers(1, 40, (3, 12)).tolist()
        with tempfile.TemporaryDirectory() as folder:
            kwiden.save_checkpoint(model, folder)
            for penalty in (1.3, 2.0, 0.7):
                for beams in (1, 3):
                    search = Search(greedy=beams == 1, beam=None if beams == 1 else beams, repetition_penalty=penalty)
                    ours = generate_ids(model, prompts, args.new, search, num_samples=beams)
                    want = theirs(args.transformers_python, folder, prompts, args.new, penalty, beams)
                    agree = sum(sorted(map(tuple, a)) == sorted(map(tuple, b)) for a, b in zip(ours, want))
                    same, total = same + agree, total + len(prompts)
                    print(
                        f"| {std} | {penalty} | {'greedy' if beams == 1 else f'beam {beams}'} | {agree}/{len(prompts)} |"
                    )
    print(f"\n{same}/{total} prompts: the same continuations as transformers")


if __name__ == "__main__":
    main()
