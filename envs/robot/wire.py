"""Wire format between a robot client and a policy server: msgpack maps with numpy arrays inside.

One message is one msgpack map. A numpy array travels as openpi's `msgpack_numpy` writes it (the
`openpi-client` package on PyPI), so openpi's WebsocketClientPolicy can talk to our server:

    {b"__ndarray__": True, b"data": <raw bytes>, b"dtype": "|u1", b"shape": [2, 64, 64, 3]}

bytes keys, and the dtype as numpy's `dtype.str` (byte order + kind + size: "<f4", "|u1", "|b1").
We always send little-endian data. The decoder also reads this project's first format (protocol 1:
str keys, dtype by name, {"__ndarray__": True, "dtype": "uint8", ...}) and openpi's numpy scalars
({b"__npgeneric__": True, b"data": 1.5, b"dtype": "<f8"}, decoded to plain Python numbers).

Request (client -> server): the observation dict of the project's convention, single or batched,
plus an optional integer "id" echoed in the reply:

    image        uint8   [V, H, W, 3]    or [B, V, H, W, 3]
    state        float32 [S]             or [B, S]
    instruction  str                     or a list of B str
openpi's LIBERO example client sends its own keys instead; they are read as the same observation:

    observation/image        uint8 [H, W, 3]   (or [B, H, W, 3])  -> view 0 (agentview)
    observation/wrist_image  uint8 [H, W, 3]   optional            -> view 1 (wrist)
    observation/state        [8] any float     (eef pos, axis-angle, gripper qpos: our state's layout)
    prompt                   str                                   -> instruction
Reply (server -> client): {"id", "actions": float32 [K, 7] (or [B, K, 7]), "timing_ms": {...}} or
{"id", "error": {"code", "field", "message"}}. Right after the handshake the server sends one
{"type": "metadata", ...} message describing the policy (chunk length, views, image size); openpi's
client reads it as its server metadata, then sends observations with `infer` and gets the reply map.

This module decodes untrusted bytes: every size is bounded before memory is allocated for it, only
plain numeric dtypes are accepted (never pickled objects), and every error names the offending field.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import msgpack
import numpy as np

# 2: arrays written in openpi's layout (bytes keys, dtype.str); 1 (still read): str keys, dtype.name
PROTOCOL_VERSION = 2
ND_KEY = "__ndarray__"  # protocol 1's marker (str); openpi's is the same name as bytes
OPENPI_ND_KEY = b"__ndarray__"
OPENPI_GENERIC_KEY = b"__npgeneric__"
# Numeric dtypes only: an "object" dtype would mean unpickling, i.e. running the sender's code.
ALLOWED_DTYPES = frozenset({"bool", "uint8", "int8", "uint16", "int16", "int32", "int64", "float16", "float32",
                            "float64"})
# dtype.str of those: an optional byte order, then kind and size ("<f4", "|u1", ">i8"); matched before
# np.dtype() sees the string, so no other dtype syntax (records, objects, "O") reaches numpy's parser
_DTYPE_STR = re.compile(r"[<>|=]?[biuf][1248]")
REQUEST_KEYS = ("image", "state", "instruction", "id")
# openpi's LIBERO example (examples/libero/main.py in openpi) -> ours
OPENPI_LIBERO_KEYS = {"observation/image": "image", "observation/wrist_image": "image",
                      "observation/state": "state", "prompt": "instruction"}


class RequestError(ValueError):
    """A request that does not follow the wire format; `field` names the offending key ('' = whole message)."""

    def __init__(self, field: str, message: str, code: str = "bad_request"):
        super().__init__(f"{field}: {message}" if field else message)
        self.field, self.message, self.code = field, message, code


@dataclass
class WireLimits:
    """Bounds on what a server accepts; anything larger is answered with an error, never allocated."""

    max_request_bytes: int = 4 * 1024 * 1024  # whole message; bigger frames are refused by the transport
    max_batch: int = 8
    max_views: int = 4
    max_image_side: int = 1024
    min_image_side: int = 8
    max_state_dim: int = 64
    max_instruction_len: int = 256
    max_depth: int = 4  # nesting of maps/lists inside a message


def _encode_default(obj: Any) -> Any:
    if isinstance(obj, np.ndarray):
        if obj.dtype.name not in ALLOWED_DTYPES:
            raise TypeError(f"cannot send a numpy array of dtype {obj.dtype} (allowed: {sorted(ALLOWED_DTYPES)})")
        arr = np.ascontiguousarray(obj, dtype=obj.dtype.newbyteorder("<"))
        # openpi's msgpack_numpy layout, so that openpi-client decodes our replies with its own unpackb
        return {OPENPI_ND_KEY: True, b"data": arr.tobytes(), b"dtype": arr.dtype.str, b"shape": list(arr.shape)}
    if isinstance(obj, np.generic):
        return obj.item()
    raise TypeError(f"cannot send an object of type {type(obj).__name__}")


def pack(obj: Any) -> bytes:
    """Encode a message (maps, lists, str, numbers, numpy arrays) as msgpack bytes."""
    return msgpack.packb(obj, default=_encode_default, use_bin_type=True)


def _field(d: dict, name: str) -> Any:
    """d[name] under openpi's bytes key or protocol 1's str key."""
    return d[name.encode()] if name.encode() in d else d.get(name)


def _dtype(value: Any, path: str) -> np.dtype:
    """The array dtype named by `value`: a dtype.str ("<f4", openpi) or a name ("float32", protocol 1)."""
    if isinstance(value, str):
        if value in ALLOWED_DTYPES:
            return np.dtype(value).newbyteorder("<")  # protocol 1 sends little-endian data
        if _DTYPE_STR.fullmatch(value):
            try:
                dtype = np.dtype(value)
            except TypeError:  # the pattern admits sizes numpy has no such type of ("<f1", "|b4")
                dtype = None
            if dtype is not None and dtype.name in ALLOWED_DTYPES:
                return dtype
    raise RequestError(path, f"array dtype {value!r} is not one of {sorted(ALLOWED_DTYPES)} (by name or as "
                             "numpy's dtype.str, e.g. '<f4')")


def _array(d: dict, path: str) -> np.ndarray:
    dtype, shape, data = _dtype(_field(d, "dtype"), path), _field(d, "shape"), _field(d, "data")
    if not isinstance(shape, list) or len(shape) > 8 or not all(type(s) is int and s >= 0 for s in shape):
        raise RequestError(path, f"array shape must be a list of at most 8 non-negative integers, got {shape!r}")
    if not isinstance(data, bytes):
        raise RequestError(path, f"array data must be msgpack bin bytes, got {type(data).__name__}")
    count = int(np.prod(shape, dtype=object)) if shape else 1  # Python ints: no overflow on hostile shapes
    if count * dtype.itemsize != len(data):
        raise RequestError(path, f"array of shape {shape} and dtype {dtype.name} needs {count * dtype.itemsize} "
                                 f"bytes, got {len(data)}")
    # native byte order out, whatever came in (a big-endian ">f4" from another machine included)
    return np.frombuffer(data, dtype=dtype).reshape(shape).astype(dtype.newbyteorder("="), copy=False)


def _scalar(d: dict, path: str) -> int | float | bool:
    """openpi's numpy scalar map -> a Python number of that dtype."""
    dtype, value = _dtype(_field(d, "dtype"), path), _field(d, "data")
    if type(value) not in (int, float, bool):
        raise RequestError(path, f"numpy scalar data must be a number, got {type(value).__name__}")
    try:
        return dtype.type(value).item()
    except (OverflowError, ValueError) as e:
        raise RequestError(path, f"numpy scalar {value!r} does not fit {dtype.name} ({e})") from None


def _arrays(obj: Any, path: str, depth: int, max_depth: int) -> Any:
    """Turn encoded arrays back into numpy arrays, recursively, with a nesting bound."""
    if depth > max_depth:
        raise RequestError(path, f"nested deeper than {max_depth} levels")
    if isinstance(obj, dict):
        if obj.get(ND_KEY) is True or obj.get(OPENPI_ND_KEY) is True:
            return _array(obj, path)
        if obj.get(OPENPI_GENERIC_KEY) is True:
            return _scalar(obj, path)
        return {k: _arrays(v, f"{path}.{_name(k)}" if path else _name(k), depth + 1, max_depth)
                for k, v in obj.items()}
    if isinstance(obj, list):
        return [_arrays(v, f"{path}[{i}]", depth + 1, max_depth) for i, v in enumerate(obj)]
    return obj


def _name(key: Any) -> str:
    return key.decode("utf-8", "replace") if isinstance(key, bytes) else str(key)


def unpack(data: object, limits: WireLimits | None = None) -> Any:
    """Decode msgpack bytes into Python objects with numpy arrays; RequestError on anything malformed."""
    limits = limits or WireLimits()
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise RequestError("", f"expected a binary msgpack message, got {type(data).__name__}")
    if len(data) > limits.max_request_bytes:
        raise RequestError("", f"message of {len(data)} bytes exceeds the limit of {limits.max_request_bytes}",
                           code="too_large")
    try:
        # Strings and bins bounded by the message itself; maps and lists of this protocol are small (a
        # request has 4 keys, a shape 8 entries, a batch of instructions max_batch), so bound them too;
        # ext types (pickles, timestamps) are refused.
        obj = msgpack.unpackb(bytes(data), raw=False, strict_map_key=True, max_str_len=len(data),
                              max_bin_len=len(data), max_array_len=1024, max_map_len=64, max_ext_len=0)
    except Exception as e:  # msgpack raises several unrelated types (ValueError, FormatError, StackError, ...)
        raise RequestError("", f"not a valid msgpack message ({type(e).__name__}: {e})") from None
    return _arrays(obj, "", 0, limits.max_depth)


def _batched(name: str, arr: Any, ndim_single: int, limits: WireLimits) -> tuple[np.ndarray, bool]:
    if not isinstance(arr, np.ndarray):
        raise RequestError(name, f"expected a numpy array (encoded as a {ND_KEY} map), got {type(arr).__name__}")
    if arr.ndim not in (ndim_single, ndim_single + 1):
        raise RequestError(name, f"expected {ndim_single} dims (one observation) or {ndim_single + 1} (a batch), "
                                 f"got shape {list(arr.shape)}")
    batched = arr.ndim == ndim_single + 1
    if batched and not 1 <= arr.shape[0] <= limits.max_batch:
        raise RequestError(name, f"batch size must be in [1, {limits.max_batch}], got {arr.shape[0]}", "too_large")
    return (arr if batched else arr[None]), batched


def _from_openpi_libero(msg: dict) -> dict[str, Any]:
    """openpi's LIBERO request keys -> ours: the views stacked [.., V, H, W, 3] (agentview, then wrist), the
    state as float32; other keys are left for `parse_request` to refuse by name."""
    unknown = sorted(str(k) for k in msg if k not in OPENPI_LIBERO_KEYS and k != "id")
    if unknown:
        raise RequestError(unknown[0], f"unknown key(s) {unknown}; an openpi LIBERO request has "
                                       f"{list(OPENPI_LIBERO_KEYS)}")
    missing = [k for k in ("observation/image", "observation/state", "prompt") if k not in msg]
    if missing:
        raise RequestError(missing[0], f"missing key(s) {missing}")
    views = [msg[k] for k in ("observation/image", "observation/wrist_image") if k in msg]
    for k, v in zip(("observation/image", "observation/wrist_image"), views):
        if not isinstance(v, np.ndarray) or v.ndim not in (3, 4):
            raise RequestError(k, f"expected a uint8 array [H, W, 3] (or [B, H, W, 3]), got "
                                  f"{getattr(v, 'shape', type(v).__name__)}")
    if len({v.shape for v in views}) > 1:
        raise RequestError("observation/wrist_image", f"expected the shape of observation/image "
                                                      f"{list(views[0].shape)}, got {list(views[1].shape)}")
    state = msg["observation/state"]
    if not isinstance(state, np.ndarray) or state.dtype.kind not in "fiu":
        raise RequestError("observation/state", f"expected a numeric array [S], got {type(state).__name__}")
    out = {"image": np.stack(views, axis=-4), "state": state.astype(np.float32), "instruction": msg["prompt"]}
    return out | ({"id": msg["id"]} if "id" in msg else {})


def parse_request(msg: Any, limits: WireLimits | None = None) -> tuple[dict[str, Any], bool, int | None]:
    """Validate a decoded request -> (batched obs, was_batched, id).

    The returned obs is {"image": uint8 [B, V, H, W, 3], "state": float32 [B, S], "instruction": list of B str}.
    """
    limits = limits or WireLimits()
    if not isinstance(msg, dict):
        raise RequestError("", f"expected a map (the observation dict), got {type(msg).__name__}")
    if any(k in OPENPI_LIBERO_KEYS for k in msg):
        msg = _from_openpi_libero(msg)
    rid = msg.get("id")
    if rid is not None and (type(rid) is not int or abs(rid) >= 2**63):
        raise RequestError("id", f"expected an integer request id, got {type(rid).__name__}")
    unknown = sorted(str(k) for k in msg if k not in REQUEST_KEYS)
    if unknown:
        raise RequestError(unknown[0], f"unknown key(s) {unknown}; a request has {list(REQUEST_KEYS)}")
    missing = [k for k in ("image", "state", "instruction") if k not in msg]
    if missing:
        raise RequestError(missing[0], f"missing key(s) {missing}")
    image, batched = _batched("image", msg["image"], 4, limits)
    if image.dtype != np.uint8:
        raise RequestError("image", f"expected dtype uint8 (0-255 pixels), got {image.dtype}")
    _, V, H, W, C = image.shape
    if C != 3 or not 1 <= V <= limits.max_views:
        raise RequestError("image", f"expected [V, H, W, 3] with 1 <= V <= {limits.max_views}, "
                                    f"got {list(image.shape[1:])}")
    if not (limits.min_image_side <= H <= limits.max_image_side
            and limits.min_image_side <= W <= limits.max_image_side):
        raise RequestError("image", f"height and width must be in [{limits.min_image_side}, {limits.max_image_side}], "
                                    f"got {H}x{W}", "too_large" if max(H, W) > limits.max_image_side else "bad_request")
    state, state_batched = _batched("state", msg["state"], 1, limits)
    if state.dtype != np.float32:
        raise RequestError("state", f"expected dtype float32, got {state.dtype}")
    if state_batched != batched or state.shape[0] != image.shape[0]:
        raise RequestError("state", f"batch does not match image: image {list(msg['image'].shape)}, "
                                    f"state {list(msg['state'].shape)}")
    if not 1 <= state.shape[1] <= limits.max_state_dim or not np.all(np.isfinite(state)):
        raise RequestError("state", f"expected 1-{limits.max_state_dim} finite values per observation, "
                                    f"got shape {list(state.shape[1:])}")
    text = msg["instruction"]
    texts = text if batched else [text]
    if not isinstance(texts, list) or len(texts) != image.shape[0] or not all(isinstance(t, str) for t in texts):
        want = f"a list of {image.shape[0]} strings" if batched else "a string"
        raise RequestError("instruction", f"expected {want}, got {type(text).__name__}")
    if not all(1 <= len(t) <= limits.max_instruction_len for t in texts):
        raise RequestError("instruction", f"each instruction must have 1-{limits.max_instruction_len} characters")
    return {"image": image, "state": state, "instruction": list(texts)}, batched, rid


def error_reply(rid: int | None, code: str, message: str, field: str = "") -> bytes:
    """An error answer: {"id", "error": {"code", "field", "message"}}."""
    return pack({"id": rid, "error": {"code": code, "field": field, "message": message}})


__all__ = ["ALLOWED_DTYPES", "ND_KEY", "OPENPI_LIBERO_KEYS", "OPENPI_ND_KEY", "PROTOCOL_VERSION", "RequestError",
           "WireLimits", "error_reply", "pack", "parse_request", "unpack"]
