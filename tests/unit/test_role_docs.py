"""Role READMEs and Galaxy metadata (acceldeploy.docsgen.roledocs, acceldeploy.docsgen.rolemeta): each README's
generated blocks match meta/argument_specs.yml and data/targets.yml, and each meta/main.yml
declares exactly the supported releases ansible-lint's meta schema can name."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from acceldeploy.docsgen import packagedata, roledocs, rolemeta
from acceldeploy.errors import AcceldeployError
from acceldeploy.inventory import roledefaults, targets

ROOT = Path(__file__).resolve().parents[2]
ROLES = roledocs.roles(ROOT / "roles")
FIX = "cd tools && ../.venv/bin/python -m acceldeploy.docsgen.roledocs --write"
ROLE_DEFAULTS = ROOT / "tools/acceldeploy/data/role-defaults.yml"


def test_every_role_is_documented():
    names = {role.name for role in ROLES}
    assert names >= {
        "ascend_runtime",
        "gaudi_runtime",
        "host_tuning",
        "model_weights",
        "python_env",
        "vllm_service",
    }


@pytest.mark.parametrize("role", ROLES, ids=lambda role: role.name)
def test_readme_matches_its_regenerated_form(role):
    readme = role / "README.md"
    assert readme.exists(), f"roles/{role.name}/README.md is missing: run `{FIX}`"
    assert readme.read_text() == roledocs.expected(role)[readme], (
        f"roles/{role.name}/README.md differs from meta/argument_specs.yml or "
        f"data/targets.yml: run `{FIX}`"
    )


@pytest.mark.parametrize("role", ROLES, ids=lambda role: role.name)
def test_meta_platforms_match_targets(role):
    meta = role / "meta" / "main.yml"
    declared = yaml.safe_load(meta.read_text())["galaxy_info"]["platforms"]
    assert declared == rolemeta.platforms(), f"roles/{role.name}/meta/main.yml: run `{FIX}`"
    assert meta.read_text() == rolemeta.render_meta(meta.read_text()), f"run `{FIX}`"


@pytest.mark.parametrize("role", ROLES, ids=lambda role: role.name)
def test_readme_lists_every_variable_once(role):
    readme = (role / "README.md").read_text()
    text = readme.split("<!-- BEGIN GENERATED: variables -->", 1)[1].split(roledocs.END, 1)[0]
    specs = roledocs.argument_specs(role)
    names = {name for spec in specs.values() for name in (spec.get("options") or {})}
    for name in names:
        assert text.count(f"| `{name}` |") == 1, name
    for entry_point in specs:
        assert f"| `{entry_point}` |" in text


@pytest.mark.parametrize("role", ROLES, ids=lambda role: role.name)
def test_requirements_name_the_releases_meta_cannot(role):
    text = (role / "README.md").read_text()
    requirements = text.split("## Requirements", 1)[1].split("\n## ", 1)[0]
    assert rolemeta.unexpressed(), "openEuler is supported and has no Galaxy platform"
    for name in rolemeta.unexpressed():
        assert f"| {name} | none:" in requirements


def test_every_supported_release_is_declared_or_listed():
    supported = targets.table()["supported"]
    declared = {(p["name"], v) for p in rolemeta.platforms() for v in p["versions"]}
    for row in supported:
        key = (str(row["id"]).lower(), str(row["version"]))
        if key in rolemeta.GALAXY:
            assert rolemeta.GALAXY[key] in declared
        else:
            assert row["name"] in rolemeta.unexpressed()
    # Nothing refused or unlisted is declared (EL, Ubuntu focal).
    rows = {(str(r["id"]).lower(), str(r["version"])) for r in supported}
    assert set(rolemeta.GALAXY) <= rows
    assert len(declared) == len(rolemeta.GALAXY)


def _schema_platforms() -> dict[str, set[str]]:
    ansiblelint = pytest.importorskip("ansiblelint")
    schema = json.loads((Path(ansiblelint.__file__).parent / "schemas" / "meta.json").read_text())
    found = {}
    for model in schema["$defs"].values():
        name = model.get("properties", {}).get("name", {}).get("const")
        versions = model.get("properties", {}).get("versions", {}).get("items", {})
        if name:
            found[name] = set(versions.get("enum", []))
    return found


def test_declared_platforms_are_in_ansible_lints_schema():
    known = _schema_platforms()
    for platform in rolemeta.platforms():
        assert platform["name"] in known
        assert set(platform["versions"]) <= known[platform["name"]], platform
    # When the schema learns a release we could not declare, map it in rolemeta.GALAXY.
    names = {name.lower().replace(" ", "") for name in known}
    assert not rolemeta.UNEXPRESSED_IDS & names


def test_a_new_release_must_be_mapped(monkeypatch):
    table = targets.table()
    row = {"id": "rocky", "version": "9", "name": "Rocky Linux 9"}
    monkeypatch.setattr(
        targets, "table", lambda: {**table, "supported": [*table["supported"], row]}
    )
    with pytest.raises(AcceldeployError, match=r"Rocky Linux 9.*GALAXY"):
        rolemeta.platforms()


def test_render_meta_keeps_the_rest():
    text = (
        "---\ngalaxy_info:\n  role_name: r\n  platforms:\n    - name: EL\n"
        '      versions: ["8", "9"]\n\n  galaxy_tags: [a]\ndependencies: []\n'
    )
    rendered = rolemeta.render_meta(text)
    data = yaml.safe_load(rendered)
    assert data["galaxy_info"]["platforms"] == rolemeta.platforms()
    assert data["galaxy_info"]["galaxy_tags"] == ["a"]
    assert data["dependencies"] == []
    assert rolemeta.render_meta(rendered) == rendered
    with pytest.raises(AcceldeployError, match="platforms"):
        rolemeta.render_meta("galaxy_info:\n  role_name: r\n")


def test_splice_keeps_prose_around_the_blocks():
    text = (
        "# r\n\nIntro.\n\n<!-- BEGIN GENERATED: variables -->\nold\n<!-- END GENERATED -->\n\n"
        "Outro.\n"
    )
    out = roledocs.splice(text, {"variables": "new table"})
    assert out.startswith("# r\n\nIntro.\n\n<!-- BEGIN GENERATED: variables -->\n")
    assert "new table\n\n<!-- END GENERATED -->\n\nOutro.\n" in out
    assert "old" not in out
    with pytest.raises(AcceldeployError, match="platforms"):
        roledocs.splice(text, {"variables": "x", "platforms": "y"})


def test_cells_escape_markdown_and_render_ansible_markup():
    assert roledocs._prose(["<org>/<name>", "a | b", "C(seed) *.launch"]) == (
        "&lt;org>/&lt;name> a \\| b `seed` \\*.launch"
    )
    assert roledocs._code("{{ a | default('') }}") == "<code>{{ a &#124; default('') }}</code>"
    assert roledocs._prose("python_env_venv_python and _extra") == (
        "python_env_venv_python and \\_extra"
    )
    option = {"type": "list", "elements": "str", "default": [], "choices": ["", "a"]}
    assert roledocs._type(option) == "list of str"
    assert roledocs._default(option) == "`[]`"
    assert roledocs._default({"required": True}) == "required"
    assert roledocs._default({}) == "—"
    assert roledocs._description(option) == 'Choices: `""`, `a`.'


def test_entry_points_with_other_variables_get_a_column():
    specs = {
        "main": {"short_description": "All", "options": {"r_a": {}, "r_b": {"type": "int"}}},
        "check": {"short_description": "Check", "options": {"r_a": {}}},
    }
    table = roledocs.render_variables(specs)
    assert "| Variable | Type | Default | Description | Entry points |" in table
    assert "| `r_a` | str | — |  | `main`, `check` |" in table
    assert "| `r_b` | int | — |  | `main` |" in table


def test_check_names_the_stale_readme_and_write_fixes_it(tmp_path, capsys):
    role = tmp_path / "roles" / "python_env"
    shutil.copytree(ROOT / "roles" / "python_env" / "meta", role / "meta")
    readme = (ROOT / "roles" / "python_env" / "README.md").read_text()
    stale = readme.replace("| `python_env_keep` |", "| `python_env_kept` |")
    (role / "README.md").write_text(stale + "\nHand-written.\n")
    roles_dir = str(tmp_path / "roles")

    assert roledocs.main(["--check", "--roles-dir", roles_dir]) == 1
    err = capsys.readouterr().err
    assert "roles/python_env/README.md is stale" in err
    assert "python -m acceldeploy.docsgen.roledocs --write" in err
    assert "meta/main.yml" not in err

    assert roledocs.main(["--write", "--roles-dir", roles_dir]) == 0
    assert (role / "README.md").read_text() == readme + "\nHand-written.\n"
    assert roledocs.main(["--check", "--roles-dir", roles_dir]) == 0


def test_write_creates_a_missing_readme(tmp_path):
    role = tmp_path / "roles" / "python_env"
    shutil.copytree(ROOT / "roles" / "python_env" / "meta", role / "meta")
    assert roledocs.main(["--write", "--roles-dir", str(tmp_path / "roles")]) == 0
    text = (role / "README.md").read_text()
    for section in ("Requirements", "Role Variables", "Dependencies", "Example Playbook"):
        assert f"## {section}\n" in text
    assert "| `python_env_keep` |" in text


def test_the_inventory_reference_lists_every_service_key_the_parser_accepts():
    """service.KEYS is the parser's list of keys and the reference's source: the page holds
    its regenerated table, and every key the parser takes has a type and a meaning."""
    from acceldeploy.serving import service

    assert set(service.KEYS) == {"name", "model", *service.DEFAULTS}
    assert all(kind and meaning for kind, meaning in service.KEYS.values())
    page = (ROOT / "docs/reference/inventory.md").read_text()
    assert roledocs.splice(page, {"service_keys": roledocs.render_service_keys()}) == page
    for key in service.KEYS:
        assert f"| `{key}` |" in page


def test_the_packaged_role_defaults_are_the_roles_own():
    """data/role-defaults.yml (what roledefaults reads, in a wheel too) is generated from every
    roles/<role>/defaults/main.yml the package reads, and says the same."""
    assert ROLE_DEFAULTS.read_text() == packagedata.expected(ROOT)[ROLE_DEFAULTS], (
        f"tools/acceldeploy/data/role-defaults.yml differs from roles/*/defaults/main.yml: "
        f"run `{FIX}`"
    )
    for role in roledefaults.ROLES:
        own = yaml.safe_load((ROOT / "roles" / role / "defaults" / "main.yml").read_text())
        assert roledefaults.role_defaults(role) == own, role


def test_check_names_stale_role_defaults_and_write_fixes_them(tmp_path, capsys):
    for role in roledefaults.ROLES:
        (tmp_path / "roles" / role / "defaults").mkdir(parents=True)
        shutil.copy(ROOT / "roles" / role / "defaults" / "main.yml",
                    tmp_path / "roles" / role / "defaults" / "main.yml")  # fmt: skip
    generated = tmp_path / "tools/acceldeploy/data/role-defaults.yml"
    generated.parent.mkdir(parents=True)
    generated.write_text(ROLE_DEFAULTS.read_text().replace("gateway_bind:", "gateway_bound:"))
    roles_dir = str(tmp_path / "roles")

    assert roledocs.main(["--check", "--roles-dir", roles_dir]) == 1
    err = capsys.readouterr().err
    assert "tools/acceldeploy/data/role-defaults.yml is stale" in err
    assert "python -m acceldeploy.docsgen.roledocs --write" in err

    assert roledocs.main(["--write", "--roles-dir", roles_dir]) == 0
    assert generated.read_text() == ROLE_DEFAULTS.read_text()
    assert roledocs.main(["--check", "--roles-dir", roles_dir]) == 0


def test_the_command_works_on_the_checkout_it_is_run_in(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(ROOT / "tools")
    assert roledocs.main(["--check"]) == 0
    monkeypatch.chdir(tmp_path)
    assert roledocs.main(["--check"]) == 2
    assert "no acceldeploy checkout (galaxy.yml and roles/) at or above" in capsys.readouterr().err


@pytest.mark.parametrize("role", ROLES, ids=lambda role: role.name)
def test_the_docs_site_has_the_readme_as_the_roles_page(role):
    """docs/reference/roles/<role>.md includes the README (after its title line) and is in the
    nav: one source, and the strict build fails on a path that moved."""
    page = ROOT / "docs" / "reference" / "roles" / f"{role.name}.md"
    assert page.exists(), f"docs/reference/roles/{role.name}.md is missing: copy another role's"
    assert f'--8<-- "roles/{role.name}/README.md:2:"' in page.read_text()
    assert (role / "README.md").read_text().startswith(f"# {role.name}\n")
    nav = (ROOT / "mkdocs.yml").read_text()
    assert f"- {role.name}: reference/roles/{role.name}.md\n" in nav
