//! The book's design chapter ("Layers and dependencies") shows two data files: what each crate
//! links directly (`tests/fixtures/crate-deps.txt`) and the arrows between the workspace's
//! crates (`tests/fixtures/crate-layers.txt`). This keeps both true by comparing them with
//! `cargo tree -e normal --depth 1` for each crate named there.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

/// The `crate: dep, dep` lines of `tests/fixtures/crate-deps.txt`.
fn listed_deps() -> Vec<(String, BTreeSet<String>)> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/crate-deps.txt");
    let text = std::fs::read_to_string(&path).expect("tests/fixtures/crate-deps.txt");
    text.lines()
        .filter_map(|l| l.split_once(": "))
        .map(|(krate, deps)| (krate.to_string(), deps.split(", ").map(str::to_string).collect()))
        .collect()
}

/// The packages that test, measure or show the others (the examples): they link whatever
/// they need, and nothing shipped may link them.
const TEST_PACKAGES: [&str; 4] = ["xtcq-tests", "xtcq-testkit", "xtcq-benches", "xtcq-examples"];

/// The packages of the workspace's members that ship (all but [`TEST_PACKAGES`]).
fn workspace_crates() -> BTreeSet<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("workspace root");
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).expect("Cargo.toml");
    let members = manifest.split("members = [").nth(1).and_then(|m| m.split(']').next()).expect("members");
    members
        .split(',')
        .map(|m| m.trim().trim_matches('"'))
        .filter(|m| !m.is_empty())
        .map(|dir| {
            let toml = std::fs::read_to_string(root.join(dir).join("Cargo.toml")).expect("member Cargo.toml");
            let name = toml.lines().find_map(|l| l.strip_prefix("name = ")).expect("package name");
            name.trim_matches('"').to_string()
        })
        .filter(|name| !TEST_PACKAGES.contains(&name.as_str()))
        .collect()
}

/// The direct normal dependencies of `krate`, by name.
fn linked(krate: &str) -> BTreeSet<String> {
    let out = Command::new(env!("CARGO"))
        .args(["tree", "--offline", "-e", "normal", "--depth", "1", "--prefix", "none", "-p", krate])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("run cargo tree");
    assert!(out.status.success(), "cargo tree -p {krate}: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.lines()
        .skip(1) // the crate itself
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

#[test]
fn the_book_lists_what_each_crate_links() {
    let lists = listed_deps();
    let named: BTreeSet<String> = lists.iter().map(|(k, _)| k.clone()).collect();
    let shipped = workspace_crates();
    assert_eq!(named, shipped, "crate-deps.txt (left) must name every crate of the workspace (right)");
    for (krate, listed) in lists {
        let have = linked(&krate);
        for test_package in TEST_PACKAGES {
            assert!(!have.contains(test_package), "{krate} links the test package {test_package}");
        }
        assert_eq!(
            listed, have,
            "tests/fixtures/crate-deps.txt is out of date for {krate}: listed (left) vs cargo tree (right)"
        );
    }
}

#[test]
fn the_client_library_links_no_runtime_no_command_line_and_no_daemon() {
    let out = Command::new(env!("CARGO"))
        .args(["tree", "--offline", "-e", "normal", "--prefix", "none", "-p", "xtcq-client"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("run cargo tree");
    assert!(out.status.success(), "cargo tree: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let names: BTreeSet<&str> = text.lines().filter_map(|l| l.split_whitespace().next()).collect();
    for banned in ["tokio", "tracing-subscriber", "clap", "xtcqd", "anyhow"] {
        assert!(!names.contains(banned), "xtcq-client links {banned}: {names:?}");
    }
}

/// The `crate -> dep, dep` lines of `tests/fixtures/crate-layers.txt`: the workspace-internal
/// arrows.
fn drawn_arrows() -> Vec<(String, BTreeSet<String>)> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/crate-layers.txt");
    let text = std::fs::read_to_string(&path).expect("tests/fixtures/crate-layers.txt");
    text.lines()
        .filter_map(|l| l.split_once(" ->"))
        .map(|(krate, deps)| {
            let deps = deps.split(',').map(str::trim).filter(|d| !d.is_empty()).map(str::to_string).collect();
            (krate.trim().to_string(), deps)
        })
        .collect()
}

#[test]
fn the_book_layers_draw_every_arrow_between_the_workspace_crates() {
    let arrows = drawn_arrows();
    let shipped = workspace_crates();
    let named: BTreeSet<String> = arrows.iter().map(|(k, _)| k.clone()).collect();
    assert_eq!(named, shipped, "crate-layers.txt (left) must name every crate of the workspace (right)");
    for (krate, listed) in &arrows {
        let have: BTreeSet<String> = linked(krate).into_iter().filter(|d| shipped.contains(d)).collect();
        assert_eq!(
            listed, &have,
            "tests/fixtures/crate-layers.txt is out of date for {krate}: drawn (left) vs cargo tree (right)"
        );
    }
    // The layering rules the book's page states.
    let of = |k: &str| arrows.iter().find(|(n, _)| n == k).map(|(_, d)| d.clone()).unwrap_or_default();
    assert!(of("xtcq-shm").is_empty(), "the engine crate links no other workspace crate");
    assert!(of("xtcq-proto").is_empty(), "the protocol crate links no other workspace crate");
    for (krate, deps) in &arrows {
        if krate != "xtcq-cli" {
            assert!(!deps.contains("xtcqd"), "only xtcq-cli may link the daemon; {krate} does");
        }
    }
}
