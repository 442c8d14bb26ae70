import os
from pathlib import Path

import pytest
import torch

from harness.sandboxed.transfer import OutputRejected, _validated_view_bytes, export_output, import_output


def test_file_round_trip_keeps_values_dtypes_and_structure(tmp_path: Path) -> None:
    out = (torch.randn(3, 4), torch.arange(5), torch.randn(2, 3).to(torch.bfloat16), torch.tensor(True),
           torch.zeros(0, 4), torch.randn(4, 6).t(), torch.randn(3, dtype=torch.complex64))
    desc = export_output(out, tmp_path, "t0")
    back = import_output(desc, tmp_path, expected_bytes=1000, device=torch.device("cpu"))
    assert isinstance(back, list) and len(back) == len(out)
    for got, sent in zip(back, out, strict=True):
        assert got.dtype == sent.dtype and got.shape == sent.shape and torch.equal(got, sent)
    single = import_output(export_output(torch.ones(2), tmp_path, "t1"), tmp_path, expected_bytes=8,
                           device=torch.device("cpu"))
    assert isinstance(single, torch.Tensor) and torch.equal(single, torch.ones(2))


def test_non_tensor_output_is_described_not_saved(tmp_path: Path) -> None:
    desc = export_output({"a": 1}, tmp_path, "t0")
    with pytest.raises(OutputRejected, match="forward returned dict"):
        import_output(desc, tmp_path, expected_bytes=100, device=torch.device("cpu"))


def test_paths_outside_the_directory_and_oversized_outputs_are_refused(tmp_path: Path) -> None:
    cpu = torch.device("cpu")
    desc = export_output(torch.zeros(4), tmp_path, "t0")
    with pytest.raises(OutputRejected, match="malformed"):
        import_output({**desc, "name": "../t0.bin"}, tmp_path, expected_bytes=16, device=cpu)
    outside = tmp_path.parent / "elsewhere.bin"
    outside.write_bytes(bytes(16))
    (tmp_path / "link.bin").symlink_to(outside)
    with pytest.raises(OutputRejected, match="outside"):
        import_output({**desc, "name": "link.bin"}, tmp_path, expected_bytes=16, device=cpu)
    big = export_output(torch.zeros(1 << 20), tmp_path, "big")
    with pytest.raises(OutputRejected, match="bytes"):
        import_output(big, tmp_path, expected_bytes=16, device=cpu)
    # A description that claims a huge shape is refused before anything is read or allocated.
    with pytest.raises(OutputRejected, match="bytes"):
        import_output({**desc, "tensors": [{"dtype": "float32", "shape": [1 << 40], "device": "cpu"}]},
                      tmp_path, expected_bytes=16, device=cpu)


@pytest.mark.parametrize("change", [
    {"tensors": [{"dtype": "object", "shape": [4], "device": "cpu"}]},
    {"tensors": [{"dtype": "float32", "shape": [-4], "device": "cpu"}]},
    {"tensors": [{"dtype": "float32", "shape": [4.0], "device": "cpu"}]},
    {"tensors": [{"dtype": "float32", "shape": [4], "device": "mps"}]},
    {"tensors": []},
    {"tensors": "float32"},
    {"name": 7},
])
def test_malformed_descriptions_are_refused(tmp_path: Path, change: dict) -> None:
    desc = export_output(torch.zeros(4), tmp_path, "t0")
    with pytest.raises(OutputRejected, match="malformed"):
        import_output({**desc, **change}, tmp_path, expected_bytes=16, device=torch.device("cpu"))


def test_a_file_that_disagrees_with_its_description_is_refused(tmp_path: Path) -> None:
    cpu = torch.device("cpu")
    desc = export_output(torch.zeros(4), tmp_path, "t0")
    with pytest.raises(OutputRejected, match="size does not match"):
        import_output({**desc, "tensors": [{"dtype": "float32", "shape": [3], "device": "cpu"}]},
                      tmp_path, expected_bytes=16, device=cpu)
    os.mkfifo(tmp_path / "fifo.bin")  # would block a plain open() until a writer came
    with pytest.raises(OutputRejected, match="missing or outside"):
        import_output({**desc, "name": "fifo.bin"}, tmp_path, expected_bytes=16, device=cpu)
    (tmp_path / "t0.bin").write_bytes(bytes(8))  # truncated after the description was sent
    with pytest.raises(OutputRejected, match="size does not match"):
        import_output(desc, tmp_path, expected_bytes=16, device=cpu)


def test_a_torch_save_file_is_not_deserialized(tmp_path: Path) -> None:
    class Evil:
        def __reduce__(self):
            return (print, ("pwned",))

    torch.save({"tensors": [Evil()]}, tmp_path / "evil.bin")
    size = (tmp_path / "evil.bin").stat().st_size
    desc = {"kind": "file", "name": "evil.bin", "single": True,
            "tensors": [{"dtype": "uint8", "shape": [size], "device": "cpu"}]}
    back = import_output(desc, tmp_path, expected_bytes=size, device=torch.device("cpu"))
    assert back.dtype == torch.uint8 and back.numel() == size  # just bytes, compared as such


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
