"""The `images` dataset: generated PNGs and a ShareGPT-shaped JSON that vLLM's `sharegpt`
dataset reads, with a chosen share of requests re-sending an earlier image (`image_reuse`),
so the multimodal processor cache and prefix caching can be measured. The JSON's image URLs
carry an `{IMAGES}` placeholder the driver replaces with its local image server."""

from __future__ import annotations

import json
from pathlib import Path

from acceldeploy.bench.profiles import Profile
from acceldeploy.verify.api import png

PROMPT = "What is in this picture? Answer in one short sentence."
PLACEHOLDER = "{IMAGES}"


def image_plan(profile: Profile) -> list[int]:
    """Which image each request sends: the first `distinct` requests new ones, the rest
    repeat them in order."""
    distinct = profile.distinct_images
    return [j % distinct for j in range(profile.prompts)]


def write(profile: Profile, out: Path) -> tuple[Path, Path]:
    """images/img-NNNN.png and dataset.template.json under `out`."""
    images = out / "images"
    images.mkdir(parents=True, exist_ok=True)
    plan = image_plan(profile)
    for index in sorted(set(plan)):
        width, height = profile.image_sizes[index % len(profile.image_sizes)]
        (images / f"img-{index:04d}.png").write_bytes(
            png(width, height, seed=profile.seed * 7919 + index)
        )
    entries = [
        {
            "id": f"req-{j}",
            "conversations": [
                {"from": "human", "value": PROMPT},
                {"from": "gpt", "value": "A picture."},
            ],
            "image": f"{PLACEHOLDER}/img-{index:04d}.png",
        }
        for j, index in enumerate(plan)
    ]
    template = out / "dataset.template.json"
    template.write_text(json.dumps(entries))
    return images, template
