"""The datasets `mode: train` trains on (issue #33), all offline: nothing is downloaded.

- `digits`: scikit-learn's bundled 8x8 handwritten digits (1,797 images, 10 classes; the
  `train` extra: `pip install 'gcbench[train]'`), pixels scaled to [0, 1]; a fixed 20%
  (360 images) held out.
- `teacher`: a generated teacher-student task with a known optimum: Gaussian inputs of 64
  features labelled by a fixed random two-layer teacher (64-32-10, ReLU): a student at
  least as wide (tiny-mlp is 64-128-128-10) can reach 100% held-out accuracy. 4,096
  training and 1,024 held-out samples.
- a tensor file of the user's: `torch.save({"x": inputs, "y": class ids})`, optionally
  with `x_test` and `y_test` (else a fixed 20% is held out), loaded with
  `weights_only=True` (tensors only, no code).
- a folder of images in torchvision's `ImageFolder` layout (`root/<class>/<image>`, the
  classes in sorted order; with `train/` and `val/` (or `test/`) beneath it, those are the
  splits, else a fixed 20% is held out), read with Pillow (the `train` extra), every
  image converted to RGB and resized to the first one's size, pixels scaled to [0, 1],
  all held in memory.

`fit_input` shapes a dataset's inputs for a zoo model: as they are where the shapes
match; images (or flat vectors of a square's size) resized (bilinear) to an image
model's size, grey ones repeated to its channels, so digits also trains the zoo's CNNs.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from pathlib import Path

import torch

from gcbench.errors import ConfigError

HELD_OUT = 0.2


@dataclass(frozen=True)
class Dataset:
    name: str
    x: torch.Tensor  # float inputs, one sample a row
    y: torch.Tensor  # int64 class ids
    x_test: torch.Tensor
    y_test: torch.Tensor
    classes: int


def _split(name: str, x: torch.Tensor, y: torch.Tensor) -> Dataset:
    """A fixed held-out 20% (the same split for every seed: a seed changes the model and
    the batches, never which samples are scored)."""
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(0))
    n_test = max(1, int(len(x) * HELD_OUT))
    test, train = order[:n_test], order[n_test:]
    return Dataset(name, x[train], y[train], x[test], y[test], int(y.max()) + 1)


def digits() -> Dataset:
    try:
        from sklearn.datasets import load_digits
    except ImportError:
        raise ConfigError(["dataset digits needs scikit-learn: pip install 'gcbench[train]' "
                           "(or name a tensor file, or use dataset: teacher)"]) from None
    data = load_digits()  # read from the package's own files
    x = torch.tensor(data.data, dtype=torch.float32) / 16.0
    return _split("digits", x, torch.tensor(data.target, dtype=torch.int64))


def teacher(features: int = 64, hidden: int = 32, classes: int = 10, n: int = 5120) -> Dataset:
    g = torch.Generator().manual_seed(1234)
    w1 = torch.randn(features, hidden, generator=g) / math.sqrt(features)
    w2 = torch.randn(hidden, classes, generator=g) / math.sqrt(hidden)
    x = torch.randn(n, features, generator=g)
    y = (torch.relu(x @ w1) @ w2).argmax(dim=1)
    cut = n - 1024
    return Dataset("teacher", x[:cut], y[:cut], x[cut:], y[cut:], classes)


def tensor_file(path: str) -> Dataset:
    where = Path(path)
    try:
        data = torch.load(where, map_location="cpu", weights_only=True)
    except Exception as e:  # an unpickling error, a file that is not torch's
        why = f"{type(e).__name__}: {(str(e).splitlines() or [''])[0][:200]}"
        raise ConfigError([f"dataset {where}: not a torch.save'd tensor file ({why})"]) from None
    if not isinstance(data, dict) or not {"x", "y"} <= set(data):
        raise ConfigError([f"dataset {where}: expected a dict with 'x' and 'y' tensors "
                           "(and optionally 'x_test', 'y_test')"])  # fmt: skip
    parts = {k: data.get(k) for k in ("x", "y", "x_test", "y_test")}
    test = parts["x_test"] is not None or parts["y_test"] is not None
    for k in ("x", "y", *(("x_test", "y_test") if test else ())):
        v = parts[k]
        ok = isinstance(v, torch.Tensor) and len(v) > 0 and (
            v.is_floating_point() if k.startswith("x") else v.dtype in (torch.int32, torch.int64)
        ) and (v.dim() == 1 if k.startswith("y") else v.dim() >= 2)
        if not ok:
            want = "floats, one sample a row" if k.startswith("x") else "class ids (int64), 1-D"
            raise ConfigError([f"dataset {where}: '{k}' must be a non-empty tensor of {want}"])
    x, y = parts["x"].float(), parts["y"].long()  # type: ignore[union-attr]
    if len(x) != len(y) or int(y.min()) < 0:
        raise ConfigError([f"dataset {where}: 'x' and 'y' differ in length or a class id "
                           "is negative"])  # fmt: skip
    if not test:
        return _split(where.name, x, y)
    xt, yt = parts["x_test"].float(), parts["y_test"].long()  # type: ignore[union-attr]
    if len(xt) != len(yt) or xt.shape[1:] != x.shape[1:] or int(yt.min()) < 0:
        raise ConfigError([f"dataset {where}: 'x_test'/'y_test' do not match 'x'/'y'"])
    return Dataset(where.name, x, y, xt, yt, int(max(y.max(), yt.max())) + 1)


@functools.lru_cache(maxsize=4)
def load_once(name: str) -> Dataset:
    """`load`, kept for this process (the checks of a suite's cells read it once)."""
    return load(name)


IMAGES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".ppm", ".webp")


Split = tuple[torch.Tensor, torch.Tensor, tuple[int, int]]


def _image_split(root: Path, size: tuple[int, int] | None, classes: list[str]) -> Split:
    """One split's images (N, 3, H, W) in [0, 1] and class ids, every image at `size`
    (W, H; None: the first image's)."""
    from PIL import Image

    xs, ys = [], []
    for label, name in enumerate(classes):
        for path in sorted((root / name).iterdir()) if (root / name).is_dir() else ():
            if path.suffix.lower() not in IMAGES:
                continue
            try:
                with Image.open(path) as im:
                    rgb = im.convert("RGB")
            except Exception as e:  # Pillow raises many kinds for a broken image
                raise ConfigError([f"dataset {path}: not an image Pillow reads "
                                   f"({type(e).__name__})"]) from None  # fmt: skip
            size = size or rgb.size
            if rgb.size != size:
                rgb = rgb.resize(size, Image.Resampling.BILINEAR)
            xs.append(torch.frombuffer(bytearray(rgb.tobytes()), dtype=torch.uint8)
                      .reshape(size[1], size[0], 3))  # fmt: skip
            ys.append(label)
    if not xs:
        raise ConfigError([f"dataset {root}: no images in its class folders "
                           f"({', '.join(IMAGES)})"])  # fmt: skip
    x = torch.stack(xs).permute(0, 3, 1, 2).float().div_(255.0)
    return x, torch.tensor(ys, dtype=torch.int64), size  # type: ignore[return-value]


def image_folder(path: str) -> Dataset:
    try:
        import PIL  # noqa: F401
    except ImportError:
        raise ConfigError([f"dataset {path}: a folder of images needs Pillow: pip install "
                           "'gcbench[train]'"]) from None  # fmt: skip
    root = Path(path)
    test_dir = next((root / d for d in ("val", "test") if (root / d).is_dir()), None)
    train_dir = root / "train" if test_dir is not None and (root / "train").is_dir() else root
    classes = sorted(p.name for p in train_dir.iterdir() if p.is_dir() and p != test_dir)
    if not classes:
        raise ConfigError([f"dataset {root}: no class folders (ImageFolder: root/<class>/<image>)"])
    x, y, size = _image_split(train_dir, None, classes)
    if test_dir is None:
        return _split(root.name, x, y)
    xt, yt, _ = _image_split(test_dir, size, classes)
    return Dataset(root.name, x, y, xt, yt, len(classes))


def load(name: str) -> Dataset:
    """A `train:` section's dataset: `digits`, `teacher`, a folder of images or a tensor
    file's path."""
    if name == "digits":
        return digits()
    if name == "teacher":
        return teacher()
    if Path(name).is_dir():
        return image_folder(name)
    return tensor_file(name)


def fit_input(x: torch.Tensor, shape: tuple[int, ...], model: str) -> torch.Tensor:
    """`x` shaped as the model's input (`shape`, one sample's): unchanged where it
    matches; square grey images resized and repeated to an image model's channels."""
    if tuple(x.shape[1:]) == tuple(shape):
        return x
    features = math.prod(x.shape[1:])
    side = math.isqrt(features)
    image = x.dim() == 4 and x.shape[1] in (1, 3)
    if len(shape) == 3 and (image or side * side == features):
        pic = x if image else x.reshape(len(x), 1, side, side)
        if tuple(pic.shape[2:]) != tuple(shape[1:]):
            pic = torch.nn.functional.interpolate(pic, size=shape[1:], mode="bilinear",
                                                  align_corners=False)  # fmt: skip
        if pic.shape[1] == shape[0]:
            return pic.contiguous()
        if pic.shape[1] == 1:
            return pic.expand(-1, shape[0], -1, -1).contiguous()
        if shape[0] == 1:
            return pic.mean(dim=1, keepdim=True)
    raise ConfigError([f"train: {model} takes inputs of shape {tuple(shape)}; the dataset's "
                       f"are {tuple(x.shape[1:])}"])  # fmt: skip
