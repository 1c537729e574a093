"""A Hugging Face ``TrainerCallback`` that checkpoints through spothop: a thin adapter.

Importing this module imports transformers. The callback saves the model,
optimizer and scheduler when the checkpointer's interval says so (or every
``every_n_steps``), allocates the host buffers for those saves in the
background after the first step, saves an emergency delta and stops training
when ``stop_requested()`` turns true (the agent's preemption signal), and waits
for the last upload at the end of training. With ``overlap`` a save's copy runs
beside the next forward and backward pass and the optimizer step waits for it
(the hook goes on the torch optimizer inside accelerate's wrapper). :meth:`SpothopCallback.restore` loads
the newest good checkpoint into a model (and optimizer/scheduler) before
``trainer.train()``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from spothop.checkpoint.checkpointer import Checkpointer
from spothop.checkpoint.manifest import Tier
from spothop.checkpoint.pytorch import TorchState


class SpothopCallback(TrainerCallback):
    """Checkpoint a ``transformers.Trainer`` run with a :class:`Checkpointer`."""

    def __init__(self, checkpointer: Checkpointer, *, every_n_steps: int | None = None,
                 stop_requested: Callable[[], bool] | None = None, overlap: bool = False) -> None:
        self.checkpointer = checkpointer
        self.every_n_steps = every_n_steps
        self.stop_requested = stop_requested
        self.overlap = overlap
        self._prepared = False
        self._parts: TorchState | None = None

    def _state(self, kwargs: dict[str, Any]) -> TorchState:
        """One ``TorchState`` for the run (its optimizer hook is registered once), renewed if the
        trainer hands over other objects."""
        model, optimizer, scheduler = kwargs["model"], kwargs.get("optimizer"), kwargs.get("lr_scheduler")
        parts = self._parts
        if parts is None or not (parts.model is model and parts.optimizer is optimizer and parts.scheduler is scheduler):
            parts = self._parts = TorchState(model, optimizer, scheduler)
        return parts

    def _due(self, step: int) -> bool:
        if self.every_n_steps is not None:
            return step > 0 and step % self.every_n_steps == 0
        return self.checkpointer.should_save()

    def on_step_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                    **kwargs: Any) -> TrainerControl:
        parts = self._state(kwargs)
        metadata = {"trainer": {"global_step": state.global_step, "epoch": state.epoch}}
        if self.stop_requested is not None and self.stop_requested():
            parts.save(self.checkpointer, state.global_step, tier=Tier.EMERGENCY, user_metadata=metadata).wait()
            control.should_training_stop = True
        elif self._due(state.global_step):
            parts.save(self.checkpointer, state.global_step, user_metadata=metadata, overlap=self.overlap)
        elif not self._prepared:
            parts.prepare(self.checkpointer)  # after the first step the optimizer state exists
        self._prepared = True
        return control

    def on_train_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                     **kwargs: Any) -> TrainerControl:
        self.checkpointer.wait()
        return control

    def restore(self, model: Any, optimizer: Any = None, scheduler: Any = None) -> int | None:
        """Load the newest good checkpoint into ``model`` (and optimizer/scheduler); returns its step."""
        return TorchState(model, optimizer, scheduler).restore(self.checkpointer)
