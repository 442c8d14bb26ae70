"""Model sandbox: profile a user's model (capture, regions, timing). Runs the model's code, sandboxed."""

from __future__ import annotations

from harness.channel import Channel, SandboxMessage
from harness.protocol import StartFailed
from harness.protocol.model import ProfileModelReply, ProfileModelRequest
from harness.sandboxed.regions.profiling import profile_model
from harness.sandboxed.roles.loading import brief_error


def serve(channel: Channel) -> None:
    request = ProfileModelRequest.from_dict(channel.recv())  # ours: a malformed one is our bug
    reply: SandboxMessage
    try:
        reply = ProfileModelReply(profile=profile_model(request))
    except BaseException as exc:  # noqa: BLE001 - a model that fails to build is reported with its line
        reply = StartFailed(message="the model failed to build or run", errors=brief_error(exc))
    channel.send(reply)
