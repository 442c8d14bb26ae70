"""Every integrity flag the harness can raise has its text for the verdict and its advice for the model."""

from agent.feedback import FLAG_MEANING, verdict_feedback
from vocabulary.flags import DECISIVE_FLAGS, FLAG_TEXT, NOTICE_FLAGS, QUARANTINE_FLAGS, Flag
from vocabulary.verdict import Stage, Status, Verdict


def test_every_flag_has_the_harness_text_and_the_agent_advice() -> None:
    assert set(FLAG_TEXT) == set(Flag)
    assert set(FLAG_MEANING) == set(Flag)
    assert all(FLAG_TEXT[flag] and FLAG_MEANING[flag] for flag in Flag)


def test_flags_split_into_decisive_quarantine_and_notices() -> None:
    assert set(Flag) == DECISIVE_FLAGS | QUARANTINE_FLAGS | NOTICE_FLAGS
    assert not DECISIVE_FLAGS & QUARANTINE_FLAGS and not (DECISIVE_FLAGS | QUARANTINE_FLAGS) & NOTICE_FLAGS


def test_deferred_work_feedback_gives_its_advice() -> None:
    verdict = Verdict(status=Status.FAIL, stage=Stage.INTEGRITY, message="deferred", flags=(Flag.DEFERRED_WORK,),
                      depth="correctness")
    text = verdict_feedback("check_correctness", verdict)
    assert FLAG_MEANING[Flag.DEFERRED_WORK] in text
