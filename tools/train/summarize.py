#!/usr/bin/env python3
"""summarize.py RUN_DIR OUT.json [NAME...] - one summary of the training rounds under RUN_DIR/NAME/ (default
ocr, speech, text; training_recipe.json): steps, seconds, first/last loss and the held-out evaluation of the last
round."""
import json
import os
import sys

run, out = sys.argv[1], sys.argv[2]
summary = {}
for name in sys.argv[3:] or ("ocr", "speech", "text"):
    p = os.path.join(run, name, "training_recipe.json")
    if not os.path.exists(p):
        summary[name] = {"error": "no checkpoint (see logs.txt)"}
        continue
    with open(p) as f:
        r = json.load(f)
    h = r["history"][-1]
    ev = {k: v for k, v in h.get("eval", {}).items() if k != "examples"}
    for v in ev.values():
        if isinstance(v, dict):
            v.pop("examples", None)
    curve = h.get("loss_curve") or [[0, 0, None, 0]]
    summary[name] = {"parameters": r.get("parameters"), "rounds": len(r["history"]), "steps": h["steps"],
                     "seconds": h["seconds"], "first_loss": curve[0][2], "last_loss": curve[-1][2], "eval": ev}
with open(out, "w") as f:
    json.dump(summary, f, indent=1)
print(json.dumps(summary, indent=1))
