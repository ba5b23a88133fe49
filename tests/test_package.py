"""What a fresh clone and a ``pip install daskgrad`` carry: the licence text, the changelog, the
contributor guide, complete metadata, the extras the docs name, and the choice of GPU extra that
``make test-gpu`` makes from the driver's CUDA version (``tools/gpu_extra.py``)."""
import importlib.util
import pathlib
import tomllib

import pytest

ROOT = pathlib.Path(__file__).parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def test_the_licence_is_the_bsd_3_clause_text_of_the_daskgrad_developers():
    text = (ROOT / "LICENSE").read_text()
    assert text.startswith("BSD 3-Clause License") and "daskgrad developers" in text
    assert "Neither the name of the copyright holder nor the names of its" in text
    assert PROJECT["license"] == "BSD-3-Clause" and PROJECT["license-files"] == ["LICENSE"]


def test_changelog_and_contributor_guide_are_at_the_top_of_the_clone():
    assert "## 0.1.0" in (ROOT / "CHANGELOG.md").read_text()
    contributing = (ROOT / "CONTRIBUTING.md").read_text()
    for section in ("## How it is built", "## Adding an op", "## Upgrading dask", "## Documentation"):
        assert section in contributing, section


def test_the_metadata_is_complete_and_the_long_description_is_the_readme():
    assert PROJECT["readme"] == "README.md"
    assert PROJECT["authors"] and PROJECT["keywords"]
    assert {"Homepage", "Documentation", "Source", "Issues", "Changelog"} <= set(PROJECT["urls"])
    assert "License :: OSI Approved :: BSD License" not in PROJECT["classifiers"]  # PEP 639: the SPDX expression
    assert any(c.startswith("Topic :: Scientific/Engineering") for c in PROJECT["classifiers"])
    assert "Typing :: Typed" in PROJECT["classifiers"]


def test_extras_cover_xarray_the_docs_and_both_cuda_majors_with_gpu_an_alias():
    extras = PROJECT["optional-dependencies"]
    assert extras["xarray"] == ["xarray>=2024.10"]
    assert extras["gpu-cuda12"] == ["cupy-cuda12x>=13"] and extras["gpu-cuda13"] == ["cupy-cuda13x>=14"]
    assert extras["gpu"] == ["daskgrad[gpu-cuda12]"]
    assert {"sphinx>=7.2", "myst-parser>=3"} <= set(extras["docs"])


def _gpu_extra():
    spec = importlib.util.spec_from_file_location("gpu_extra", ROOT / "tools" / "gpu_extra.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SMI_HEADER = ("| NVIDIA-SMI {drv}                 Driver Version: {drv}         CUDA Version: {cuda}     |\n"
              "|-----------------------------------------+------------------------+----------------------+\n")


@pytest.mark.parametrize("cuda, extra, other", [("12.4", "gpu-cuda12", "cupy-cuda13x"),
                                                ("13.0", "gpu-cuda13", "cupy-cuda12x")])
def test_make_test_gpu_picks_the_extra_of_the_drivers_cuda_major_version(cuda, extra, other, monkeypatch, capsys):
    gpu_extra = _gpu_extra()
    monkeypatch.setattr(gpu_extra, "smi_output", lambda: SMI_HEADER.format(drv="580.65", cuda=cuda))
    gpu_extra.main([])
    assert capsys.readouterr().out.strip() == extra
    gpu_extra.main(["--conflicting"])
    assert capsys.readouterr().out.strip() == other


def test_without_a_driver_or_with_another_cuda_major_make_test_gpu_says_why(monkeypatch):
    gpu_extra = _gpu_extra()
    monkeypatch.setenv("PATH", str(ROOT / "no-such-dir"))
    with pytest.raises(SystemExit, match="no NVIDIA driver on this machine"):
        gpu_extra.smi_output()
    with pytest.raises(SystemExit, match="CUDA 11; daskgrad's GPU extras are gpu-cuda12, gpu-cuda13"):
        gpu_extra.extra_for(gpu_extra.cuda_major(SMI_HEADER.format(drv="470.1", cuda="11.4")))
    with pytest.raises(SystemExit, match="printed no 'CUDA Version'"):
        gpu_extra.extra_for(gpu_extra.cuda_major("No devices were found"))
