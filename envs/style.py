"""Structure-preserving style changes of a LIBERO scene: same geometry and physics, another look.

A style is a scene-XML processor (robosuite's `set_xml_processor` hook) that changes only visual
attributes: light colour/intensity/position, material colour tints, and the table/floor/wall
textures (swapped for other textures LIBERO ships). Collision shapes, masses, friction and joint
layout are untouched, so the same actions from the same seeded reset give the same state trajectory
under every style; the world model then sees one trajectory in many looks (Sword-style augmentation).
"""
from __future__ import annotations

import hashlib
import os
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

# Scene surfaces (texture names in LIBERO scene XML) and which shipped textures may replace them.
_SURFACE_TEXTURES = {
    "tex-table": ("table", "wood", "marble", "ceramic"),
    "tex-table-legs": ("table", "wood", "marble", "ceramic"),
    "texplane": ("floor", "tile"),
    "tex-wall": ("wall", "plaster"),
    "tex-ceramic": ("ceramic", "tile"),
}


@dataclass
class StyleConfig:
    """Ranges of the random visual changes (multiplicative factors are drawn uniformly)."""

    light_intensity: tuple[float, float] = (0.55, 1.35)
    light_tint: float = 0.15  # per-channel multiplier in [1 - tint, 1 + tint]
    light_shift: float = 1.0  # m, uniform jitter of each light position (shadows are off in LIBERO)
    material_tint: float = 0.25  # per-material RGB multiplier amplitude (rgba multiplies textures)
    swap_textures: bool = True


def _unit(seed: int, name: str) -> np.random.Generator:
    # A per-element generator keyed by (style seed, element name): the same style changes an element
    # the same way at every scene reload, whatever order the XML lists elements in.
    digest = hashlib.sha256(f"{seed}:{name}".encode()).digest()
    return np.random.default_rng(int.from_bytes(digest[:8], "little"))


def _fmt(values) -> str:
    return " ".join(f"{float(v):.4g}" for v in values)


def _parse(text: str | None, n: int, default: float) -> np.ndarray:
    vals = [float(x) for x in text.split()] if text else []
    return np.array(vals + [default] * (n - len(vals)), dtype=np.float64)[:n]


_MAX_TEXTURE_PX = 1300


@lru_cache(maxsize=4)
def _texture_pool(folder: str) -> tuple[str, ...]:
    """Square PNGs of at most 1300 px in `folder`: MuJoCo maps a single image onto every face of a
    cube texture, and a non-square one made the compiler hang; big images slow every scene reload."""
    from PIL import Image  # Pillow: declared in setup.py; imported here only when styles are drawn

    pool = []
    for f in sorted(os.listdir(folder)):
        if f.endswith(".png"):
            with Image.open(os.path.join(folder, f)) as im:
                w, h = im.size
            if w == h <= _MAX_TEXTURE_PX:
                pool.append(f)
    return tuple(pool)


def _replacement_texture(file: str, keywords: tuple[str, ...], rng: np.random.Generator) -> str:
    folder = os.path.dirname(os.path.abspath(file))
    pool = [f for f in _texture_pool(folder) if any(k in f for k in keywords)]
    return os.path.join(folder, pool[int(rng.integers(len(pool)))]) if pool else file


def style_processor(seed: int, config: StyleConfig | None = None) -> Callable[[str], str]:
    """The scene-XML processor of style `seed` (a fixed draw: applying it twice gives the same XML)."""
    cfg = config or StyleConfig()

    def process(xml: str) -> str:
        root = ET.fromstring(xml)
        for light in root.iter("light"):
            rng = _unit(seed, "light:" + light.get("name", ""))
            scale = rng.uniform(*cfg.light_intensity) * rng.uniform(1 - cfg.light_tint, 1 + cfg.light_tint, 3)
            light.set("diffuse", _fmt(np.clip(_parse(light.get("diffuse"), 3, 0.7) * scale, 0, 1)))
            pos = _parse(light.get("pos"), 3, 0.0) + rng.uniform(-cfg.light_shift, cfg.light_shift, 3) * [1, 1, 0]
            light.set("pos", _fmt(pos))
        for mat in root.iter("material"):
            rng = _unit(seed, "material:" + mat.get("name", ""))
            rgba = _parse(mat.get("rgba"), 4, 1.0)
            rgba[:3] = np.clip(rgba[:3] * rng.uniform(1 - cfg.material_tint, 1 + cfg.material_tint, 3), 0, 1)
            mat.set("rgba", _fmt(rgba))  # alpha kept: transparency would change what is visible
        if cfg.swap_textures:
            for tex in root.iter("texture"):
                # Keyed by keyword group, so the table top and its legs get the same new texture.
                name, file = tex.get("name", ""), tex.get("file")
                if file and name in _SURFACE_TEXTURES:
                    group = _SURFACE_TEXTURES[name]
                    tex.set("file", _replacement_texture(file, group, _unit(seed, "texture:" + ",".join(group))))
        return ET.tostring(root, encoding="unicode")

    process.style_seed = seed  # type: ignore[attr-defined]
    return process
