from pathlib import Path

import pytest
import torch

from harness.transfer import OutputRejected, _validated_view_bytes, export_output, import_output


def test_file_round_trip_keeps_values_and_structure(tmp_path: Path) -> None:
    out = (torch.randn(3, 4), torch.arange(5))
    desc = export_output(out, tmp_path, "t0")
    back = import_output(desc, tmp_path, expected_bytes=100, device=torch.device("cpu"))
    assert isinstance(back, list) and torch.equal(back[0], out[0]) and torch.equal(back[1], out[1])


def test_non_tensor_output_is_described_not_saved(tmp_path: Path) -> None:
    desc = export_output({"a": 1}, tmp_path, "t0")
    with pytest.raises(OutputRejected, match="forward returned dict"):
        import_output(desc, tmp_path, expected_bytes=100, device=torch.device("cpu"))


def test_paths_outside_the_directory_and_oversized_files_are_refused(tmp_path: Path) -> None:
    with pytest.raises(OutputRejected, match="malformed"):
        import_output({"kind": "file", "name": "../x.pt"}, tmp_path, expected_bytes=10, device=torch.device("cpu"))
    outside = tmp_path.parent / "elsewhere.pt"
    torch.save({"tensors": [torch.zeros(1)], "devices": ["cpu"], "single": True}, outside)
    (tmp_path / "link.pt").symlink_to(outside)
    with pytest.raises(OutputRejected, match="outside"):
        import_output({"kind": "file", "name": "link.pt"}, tmp_path, expected_bytes=10, device=torch.device("cpu"))
    desc = export_output(torch.zeros(1 << 20), tmp_path, "big")
    with pytest.raises(OutputRejected, match="bytes"):
        import_output(desc, tmp_path, expected_bytes=16, device=torch.device("cpu"))


def test_pickled_code_is_never_run(tmp_path: Path) -> None:
    class Evil:
        def __reduce__(self):
            return (print, ("pwned",))

    torch.save({"tensors": [Evil()], "devices": ["cpu"], "single": True}, tmp_path / "evil.pt")
    with pytest.raises(OutputRejected, match="unreadable"):
        import_output({"kind": "file", "name": "evil.pt"}, tmp_path, expected_bytes=10, device=torch.device("cpu"))


def test_ipc_views_must_fit_their_allocation() -> None:
    spec = {"dtype": "float32", "shape": [4, 4], "stride": [4, 1], "storage_offset": 0, "storage_bytes": 64,
            "offset_bytes": 0}
    assert _validated_view_bytes(spec) == (torch.float32, 64)
    with pytest.raises(OutputRejected, match="past its allocation"):
        _validated_view_bytes({**spec, "storage_offset": 1})
    with pytest.raises(OutputRejected, match="malformed"):
        _validated_view_bytes({**spec, "stride": [-4, 1]})
    with pytest.raises(OutputRejected, match="malformed"):
        _validated_view_bytes({**spec, "dtype": "object"})
