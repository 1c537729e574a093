"""A Hugging Face ``TrainerCallback`` that checkpoints through spothop: a thin adapter.

Importing this module imports transformers. The callback saves the model,
optimizer and scheduler when the checkpointer's interval says so (or every
``every_n_steps``) or the agent asks (an advance notice), allocates the host
buffers for those saves in the background after the first step, and when
``stop_requested()`` turns true (by default the agent's final notice) saves an
emergency delta within the agent's deadline, tells the agent, stops training and
raises :class:`~spothop.checkpoint.preemption.Preempted` (exit code 75) out of
``trainer.train()``. At the end of training it waits for the last upload. With ``overlap`` a save's copy runs
beside the next forward and backward pass and the optimizer step waits for it
(the hook goes on the torch optimizer inside accelerate's wrapper). :meth:`SpothopCallback.restore` loads
the newest good checkpoint into a model (and optimizer/scheduler) before
``trainer.train()``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from spothop.checkpoint import preemption
from spothop.checkpoint.checkpointer import Checkpointer
from spothop.checkpoint.manifest import Tier
from spothop.checkpoint.pytorch import TorchState
from spothop.worker import sdk


class SpothopCallback(TrainerCallback):
    """Checkpoint a ``transformers.Trainer`` run with a :class:`Checkpointer`."""

    def __init__(
        self,
        checkpointer: Checkpointer,
        *,
        every_n_steps: int | None = None,
        stop_requested: Callable[[], bool] | None = None,
        overlap: bool = False,
    ) -> None:
        self.checkpointer = checkpointer
        self.every_n_steps = every_n_steps
        self.stop_requested = stop_requested or sdk.stop_requested
        self.overlap = overlap
        self._prepared = False
        self._parts: TorchState | None = None
        self._preempted: preemption.Preempted | None = None
        if stop_requested is None:
            preemption.listen()  # the agent's final notice becomes a request, not a SIGTERM mid-step

    def _state(self, kwargs: dict[str, Any]) -> TorchState:
        """One ``TorchState`` for the run (its optimizer hook is registered once), renewed if the
        trainer hands over other objects."""
        model, optimizer, scheduler = (
            kwargs["model"],
            kwargs.get("optimizer"),
            kwargs.get("lr_scheduler"),
        )
        parts = self._parts
        if parts is None or not (
            parts.model is model and parts.optimizer is optimizer and parts.scheduler is scheduler
        ):
            parts = self._parts = TorchState(model, optimizer, scheduler)
        return parts

    def _periodic(self, step: int) -> bool:
        if self.every_n_steps is not None:
            return step > 0 and step % self.every_n_steps == 0
        return self.checkpointer.should_save()

    def on_step_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> TrainerControl:
        parts = self._state(kwargs)
        metadata: dict[str, Any] = {
            "trainer": {"global_step": state.global_step, "epoch": state.epoch}
        }
        reason = preemption.due(
            self.checkpointer,
            stop_requested=self.stop_requested,
            periodic=lambda: self._periodic(state.global_step),
        )
        if reason is not None:
            metadata["reason"] = reason.value
        if reason is preemption.Reason.STOP:
            self._preempted = preemption.emergency_save(
                self.checkpointer,
                state.global_step,
                lambda: parts.save(
                    self.checkpointer,
                    state.global_step,
                    tier=Tier.EMERGENCY,
                    user_metadata=metadata,
                ),
            )
            control.should_training_stop = True
        elif reason is not None:
            parts.save(
                self.checkpointer, state.global_step, user_metadata=metadata, overlap=self.overlap
            )
        elif not self._prepared:
            parts.prepare(self.checkpointer)  # after the first step the optimizer state exists
        self._prepared = True
        return control

    def on_train_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> TrainerControl:
        self.checkpointer.wait()
        if self._preempted is not None:
            raise self._preempted  # out of trainer.train(): exit code 75, preempted and resumable
        return control

    def restore(self, model: Any, optimizer: Any = None, scheduler: Any = None) -> int | None:
        """Load the newest good checkpoint into ``model`` (and optimizer/scheduler); returns its step."""
        return TorchState(model, optimizer, scheduler).restore(self.checkpointer)
