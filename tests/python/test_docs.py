"""Every public class, method and property of dsh_native has a docstring,
and help(dsh_native.Executor) shows each keyword with its default and unit."""

import inspect
import pydoc

import pytest

import dsh_native


def public_classes() -> list[type]:
    return [obj for name in dsh_native.__all__ if isinstance(obj := getattr(dsh_native, name), type)]


@pytest.mark.parametrize("cls", public_classes(), ids=lambda c: c.__name__)
def test_every_public_member_has_a_docstring(cls: type) -> None:
    assert (cls.__doc__ or "").strip(), f"{cls.__name__} has no docstring"
    missing = []
    for klass in cls.__mro__:
        if klass is object or klass.__module__.split(".")[0] != "dsh_native":
            continue
        for name, member in vars(klass).items():
            if name.startswith("_") or not (callable(member) or inspect.isdatadescriptor(member)):
                continue
            if not (getattr(member, "__doc__", None) or "").strip():
                missing.append(f"{klass.__name__}.{name}")
    assert not missing, f"undocumented: {', '.join(missing)}"


def test_help_shows_every_executor_keyword_with_its_default() -> None:
    text = pydoc.render_doc(dsh_native.Executor, renderer=pydoc.plaintext)
    keywords = list(inspect.signature(dsh_native.Executor).parameters)
    assert keywords == [
        "cwd", "timeout_ms", "max_timeout_ms", "max_output_bytes", "max_spill_bytes",
        "grace_ms", "spill_dir", "retain_settled", "sandbox_mode", "limits",
    ]
    for keyword in keywords:
        assert f"``{keyword}``:" in text, f"help(Executor) does not describe {keyword}"
    for default in ("120000", "600000", "64000", "67108864", "3000", "1000", "milliseconds", "bytes"):
        assert default in text
    resolve = pydoc.render_doc(dsh_native.Executor.resolve, renderer=pydoc.plaintext)
    for keyword in inspect.signature(dsh_native.Executor.resolve).parameters:
        if keyword != "self":
            assert f"``{keyword}``" in resolve, f"help(Executor.resolve) does not describe {keyword}"


def test_help_shows_one_clean_executor_class() -> None:
    """The Python Executor wraps the native one rather than subclassing a
    class of the same name: help() shows one class, every method its own."""
    text = pydoc.render_doc(dsh_native.Executor, renderer=pydoc.plaintext)
    assert "class Executor(builtins.object)" in text, text.splitlines()[:4]
    assert "inherited from" not in text
    for name in ("resolve", "run", "run_async", "start", "on_task_done", "spawn_terminal", "close"):
        assert f"{name}(" in text, f"help(Executor) does not list {name}"


def test_the_constructor_keywords_are_reconfigures() -> None:
    """On CPython 3.9 the abi3 class carries no text signature, and
    Executor's comes from reconfigure(): the two take the same keywords."""
    native = dsh_native._native.Executor
    reconfigure = list(inspect.signature(native.reconfigure).parameters)[1:]
    assert list(inspect.signature(dsh_native.Executor).parameters) == reconfigure
    try:
        constructor = list(inspect.signature(native).parameters)
    except ValueError:  # CPython 3.9
        return
    assert constructor == reconfigure
