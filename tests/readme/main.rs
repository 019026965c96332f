//! README.md and the guide in `docs/`, pasted as a newcomer pastes them: every shell block, in
//! order, into bash, in a fresh copy of the repository, and each output it shows checked against
//! what came out. The rules, for the pages' writers, are in `docs/README.md` ("How the examples
//! are tested"):
//!
//! - README.md first, then the pages `docs/README.md` lists, in its order; a page of `docs/` it
//!   does not list is an error. Each page gets a fresh shell: a block with no directive goes to
//!   its page's shell, under `set -e` (a command that fails fails its block), so what one block
//!   leaves (a variable, a job, an exported variable) is there for the page's next block, as in a
//!   reader's terminal. At the end of each page no `TOOLGATE_*` variable may be left exported,
//!   and the page's shell ends, with whatever it started.
//! - `<!-- README test: background, ready at URL -->` above a block: a server the reader runs in
//!   a terminal of its own. It is started aside, and the next block waits until URL answers 200.
//!   It runs until the end of the test, so the README's server serves every page.
//! - `<!-- README test: skip: WHY -->`: not run here (no Docker daemon, a client that is not
//!   installed, this very command). Each skip is listed in the test's output.
//! - A comment that begins with `{` or `[` is an output the block shows: each must be found in
//!   its block's output, in order, `…` matching anything.
//!
//! The copy is the repository's files (tracked, or new and not ignored) in
//! `$CARGO_TARGET_TMPDIR/readme-clone`, refreshed at each run; its `target/` stays, so the
//! release build the README asks for is built once and then incrementally. The test suite's
//! installed packages (`.ci/venv`, `.ci/node/node_modules`) are linked in, as `.ci/test-deps`
//! would make them. The examples use the ports 8080 to 8099 of 127.0.0.1, which must be free.
//!
//! The same binary checks the guide against the code it describes: the key table against
//! `config/default.toml` (`config_table`), the layout against `src/` (`layout`), and every link
//! between the pages (`links`).

mod blocks;
mod config_table;
mod layout;
mod links;
mod shell;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use blocks::{Run, find_in_order, shell_blocks};
use shell::{Shell, Terminal};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The pages whose shell blocks run, in order: README.md, then the pages of `docs/` in the order
/// `docs/README.md` first links them (its numbered list of the guide comes first). A page of
/// `docs/` the index does not link is an error, so that none escapes the test.
fn pages() -> Vec<String> {
    let index = std::fs::read_to_string(repo().join("docs/README.md")).unwrap();
    let mut pages = vec!["README.md".to_owned()];
    for (_, rest) in index
        .match_indices("](")
        .map(|(at, _)| index.split_at(at + 2))
    {
        let target = rest.split([')', '#']).next().unwrap_or("");
        let page = format!("docs/{target}");
        if target.ends_with(".md") && !target.contains('/') && !pages.contains(&page) {
            pages.push(page);
        }
    }
    let mut unlinked = Vec::new();
    for entry in std::fs::read_dir(repo().join("docs")).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        if name.ends_with(".md") && name != "README.md" && !pages.contains(&format!("docs/{name}"))
        {
            unlinked.push(name);
        }
    }
    assert!(
        unlinked.is_empty(),
        "docs/README.md links no {unlinked:?}: list each page of the guide there, so that its examples run"
    );
    pages
}

/// A fresh copy of the repository's files at `into`, keeping `into/target`.
fn fresh_copy(into: &Path) {
    std::fs::create_dir_all(into).unwrap();
    for entry in std::fs::read_dir(into).unwrap() {
        let entry = entry.unwrap();
        if entry.file_name() == "target" {
            continue;
        }
        let path = entry.path();
        if entry.file_type().unwrap().is_dir() {
            std::fs::remove_dir_all(&path).unwrap();
        } else {
            std::fs::remove_file(&path).unwrap();
        }
    }
    let listed = Command::new("git")
        .args([
            "ls-files",
            "-z",
            "--cached",
            "--others",
            "--exclude-standard",
        ])
        .current_dir(repo())
        .output()
        .expect("git lists the repository's files");
    assert!(
        listed.status.success(),
        "git ls-files: {}",
        String::from_utf8_lossy(&listed.stderr)
    );
    let mut copied = 0;
    for name in listed
        .stdout
        .split(|b| *b == 0)
        .filter(|name| !name.is_empty())
    {
        let name = std::str::from_utf8(name).unwrap();
        let from = repo().join(name);
        if !from.is_file() {
            continue; // deleted in the work tree, or a link to an installed folder
        }
        let to = into.join(name);
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(&from, &to).unwrap();
        // The original's time, so that cargo rebuilds only what changed since the last run.
        let modified = std::fs::metadata(&from).unwrap().modified().unwrap();
        std::fs::File::options()
            .write(true)
            .open(&to)
            .unwrap()
            .set_modified(modified)
            .unwrap();
        copied += 1;
    }
    assert!(
        copied > 50,
        "the copy holds the repository ({copied} files)"
    );
    for installed in [".ci/venv", ".ci/node/node_modules"] {
        let from = repo().join(installed);
        if from.exists() {
            std::os::unix::fs::symlink(&from, into.join(installed)).unwrap();
        }
    }
}

fn ports_are_free() {
    for port in 8080..8100 {
        assert!(
            std::net::TcpStream::connect(("127.0.0.1", port)).is_err(),
            "127.0.0.1:{port} is taken; the README's examples need 8080 to 8099 (stop the server on it)"
        );
    }
}

/// How long a block may take: building the release binary takes minutes on two cores.
fn limit_for(text: &str) -> Duration {
    if text.contains("cargo ") {
        Duration::from_secs(60 * 60)
    } else {
        Duration::from_secs(180)
    }
}

#[test]
fn every_shell_block_of_the_readme_runs_as_pasted_and_shows_what_it_says() {
    let pages: Vec<(String, Vec<blocks::Block>)> = pages()
        .into_iter()
        .map(|page| {
            let text = std::fs::read_to_string(repo().join(&page)).unwrap();
            let blocks = shell_blocks(&page, &text).unwrap_or_else(|e| panic!("{e}"));
            (page, blocks)
        })
        .collect();
    ports_are_free();
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("readme-clone");
    fresh_copy(&dir);

    // The servers run aside (the README's, on 8080) serve every page that follows.
    let mut terminals: Vec<Terminal> = Vec::new();
    let (mut pasted, mut skipped, mut tally) = (0, Vec::new(), Vec::new());
    for (page, blocks) in &pages {
        let mut shell = Shell::open(&dir);
        let (mut ran, mut skips) = (0, 0);
        for block in blocks {
            let name = block.name();
            match &block.run {
                Run::Skip { reason } => {
                    skipped.push(format!("{name}: {reason}"));
                    skips += 1;
                }
                Run::Background { ready } => {
                    let log = dir.join(format!("terminal-{}.log", terminals.len() + 1));
                    let mut terminal = Terminal::start(&dir, &block.text, log);
                    terminal
                        .wait_ready(ready, limit_for(&block.text))
                        .unwrap_or_else(|e| panic!("{name}, in a terminal of its own: {e}"));
                    terminals.push(terminal);
                    ran += 1;
                }
                Run::Shell => {
                    let out = shell
                        .paste(&block.text, limit_for(&block.text))
                        .unwrap_or_else(|e| panic!("{name}:\n{}\n--- failed: {e}", block.text));
                    find_in_order(&out.stdout, &block.expected).unwrap_or_else(|e| {
                        panic!(
                            "{name}:\n{}\n--- {e}\n--- stderr:\n{}",
                            block.text, out.stderr
                        )
                    });
                    eprintln!("ran {name}: {} outputs as shown", block.expected.len());
                    pasted += 1;
                    ran += 1;
                }
            }
        }
        let left = shell
            .paste("env | grep '^TOOLGATE_' || true", Duration::from_secs(10))
            .unwrap();
        assert_eq!(left.stdout, "", "{page}'s examples leave these exported");
        // The page's shell ends here, and with it whatever its examples left running.
        drop(shell);
        tally.push(format!("{page}: {ran} blocks run, {skips} skipped"));
    }
    for skip in &skipped {
        eprintln!("skipped {skip}");
    }
    for line in &tally {
        eprintln!("{line}");
    }
    assert!(
        pasted >= 8 && !terminals.is_empty(),
        "ran {pasted} blocks, {} servers aside",
        terminals.len()
    );
}
