"""A suite's `train:` section (issue #33, `mode: train`): what the cells' DDP workers
train on, for how long and how, the accuracy a run aims at, and the cluster the trained
cells' iteration times are projected onto for time-to-accuracy.

Each repetition of a trained cell is one training run from its own seed (the suite's
`seed` plus the repetition), so `repetitions:` is the number of seeds behind each figure.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationInfo, field_validator

from gcbench.config.fields import DeviceName, Frozen, Rate, Whole, suite_path
from gcbench.config.network_profile import Network

# Datasets that need nothing downloaded: scikit-learn's bundled 8x8 digits (1,797
# images, the `train` extra) and a generated teacher-student task; anything else is the
# user's, named by its path: a folder of images (ImageFolder's layout) or a tensor file.
BUILTIN_DATASETS = ("digits", "teacher")
MAX_STEPS = 1_000_000


class Project(Frozen):
    """The cluster a trained cell's iteration time is simulated on for time-to-accuracy:
    the trained cell's strategy and compressor on this model, device, cluster and
    network. Steps to target come from the small task: a proxy, and labelled so."""

    model: str = Field(description="a zoo model (gcbench models)")
    device: DeviceName = "v100"
    machines: Whole = Field(1, ge=1, le=2**20)
    gpus_per_machine: Whole = Field(8, ge=1, le=1024)
    network: Network

    @field_validator("model")
    @classmethod
    def _known_model(cls, value: str) -> str:
        from gcbench.zoo.catalog import MODELS

        if value not in MODELS:
            raise ValueError(f"unknown model {value!r}; valid: {', '.join(sorted(MODELS))}")
        return value


class Train(Frozen):
    """How a trained cell trains: every rank draws its own slice of each global batch
    (the model's batch size per rank), steps `steps` times with the cell's compressor as
    its DDP hook, and evaluates the held-out split every `eval_every` steps."""

    dataset: str = Field(
        "digits",
        description="digits (scikit-learn's bundled 8x8 digits: pip install "
        "'gcbench[train]'), teacher (a generated teacher-student task whose optimum is "
        "100% accuracy), a folder of your images in torchvision's ImageFolder layout "
        "(root/<class>/<image>; train/ and val/ beneath it for the splits, else 20% is "
        "held out), or a tensor file of yours: torch.save({'x': inputs, 'y': class ids}) "
        "with optional 'x_test'/'y_test'",
    )
    steps: Whole = Field(300, ge=1, le=MAX_STEPS)
    eval_every: Whole = Field(25, ge=1, le=MAX_STEPS)
    optimizer: Literal["sgd", "adam"] = "sgd"
    lr: Rate = Field(0.1, le=10.0, description="the learning rate")
    momentum: float = Field(0.9, ge=0.0, lt=1.0, description="sgd's momentum")
    schedule: Literal["constant", "cosine"] = Field(
        "constant", description="the learning rate constant, or cosine-annealed to 0"
    )
    target: float | None = Field(
        None,
        gt=0.0,
        le=1.0,
        description="the held-out accuracy a run aims at: each run's steps to reach it "
        "(first evaluation at or above it) and its time-to-accuracy",
    )
    project: Project | None = Field(
        None, description="the cluster that time-to-accuracy is simulated on (else measured)"
    )

    @field_validator("dataset")
    @classmethod
    def _dataset(cls, value: str, info: ValidationInfo) -> str:
        """A bundled dataset's name, or a folder's or tensor file's path resolved against
        the suite's folder (so a cell holds where it reads from)."""
        if value in BUILTIN_DATASETS:
            return value
        base = (info.context or {}).get("base_dir")
        path = suite_path(value, Path(base) if base is not None else None)
        if not path.exists():
            builtin = ", ".join(BUILTIN_DATASETS)
            raise ValueError(f"dataset {value!r}: no such file or folder (built in: "
                             f"{builtin}; else an image folder or a tensor file)")  # fmt: skip
        return str(path)

    @staticmethod
    def no_columns() -> dict[str, Any]:
        """The train columns of a cell that does not train (`Cell.flat`)."""
        return {"dataset": None, "train_steps": None, "target": None}

    def flat(self) -> dict[str, Any]:
        """The train columns of a trained cell (`Cell.flat`)."""
        return {"dataset": Path(self.dataset).name if self.dataset not in BUILTIN_DATASETS
                else self.dataset, "train_steps": self.steps, "target": self.target}  # fmt: skip
