//! A page's shell blocks (README.md's, or a page of the guide in `docs/`), as a reader sees
//! them: the fenced `sh` and `bash` blocks in order, each with the section it is in, what its
//! directive says of it, and the outputs it shows.

/// How the test runs a block, from an HTML comment right above it (a reader does not see it):
/// `<!-- README test: background, ready at URL -->` or `<!-- README test: skip: why -->`.
/// Without one, a block is pasted into the one shell every other block goes to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Run {
    /// Pasted into the shell, in order.
    Shell,
    /// A server run in a terminal of its own: the test starts it aside and goes on once `ready`
    /// answers.
    Background { ready: String },
    /// Not run here (a Docker daemon, a client that is not installed); the reason is required.
    Skip { reason: String },
}

#[derive(Debug, Clone)]
pub struct Block {
    /// The page it is on, as the repository names it (`README.md`, `docs/api.md`).
    pub page: String,
    /// The heading of the section it is in.
    pub section: String,
    /// Its first line on its page, 1-based.
    pub line: usize,
    pub text: String,
    pub run: Run,
    /// The outputs its comments show, in order (see [`expected_outputs`]).
    pub expected: Vec<String>,
}

impl Block {
    pub fn name(&self) -> String {
        format!("{}:{} ({})", self.page, self.line, self.section)
    }
}

const DIRECTIVE: &str = "<!-- README test:";

/// Every shell block of `text`, the page `page`. A directive that is not understood, or one that
/// stands above no shell block, is an error: a typo must not quietly turn a block's check off.
pub fn shell_blocks(page: &str, text: &str) -> Result<Vec<Block>, String> {
    let mut blocks = Vec::new();
    let mut section = String::from("the top");
    let mut pending: Option<(usize, Run)> = None;
    let mut lines = text.lines().enumerate();
    while let Some((index, line)) = lines.next() {
        let number = index + 1;
        // Outside a code block (a block's lines are read below), a `#` line is a heading.
        if line.starts_with('#') {
            section = line.trim_start_matches('#').trim().to_owned();
        }
        if let Some(rest) = line.trim().strip_prefix(DIRECTIVE) {
            if let Some((at, _)) = pending {
                return Err(format!("{page}:{at}: a directive above no shell block"));
            }
            pending = Some((
                number,
                directive(rest).map_err(|e| format!("{page}:{number}: {e}"))?,
            ));
            continue;
        }
        let Some(info) = line.strip_prefix("```") else {
            if pending.is_some() && !line.trim().is_empty() {
                let (at, _) = pending.take().unwrap();
                return Err(format!("{page}:{at}: a directive above no shell block"));
            }
            continue;
        };
        let language = info.split([' ', ',']).next().unwrap_or("");
        let mut text = String::new();
        for (_, body) in lines.by_ref() {
            if body.starts_with("```") {
                break;
            }
            text.push_str(body);
            text.push('\n');
        }
        let run = pending.take().map(|(_, run)| run);
        if !matches!(language, "sh" | "bash" | "shell") {
            if run.is_some() {
                return Err(format!(
                    "{page}:{number}: a directive above a `{language}` block"
                ));
            }
            continue;
        }
        blocks.push(Block {
            page: page.to_owned(),
            section: section.clone(),
            line: number,
            expected: expected_outputs(&text),
            text,
            run: run.unwrap_or(Run::Shell),
        });
    }
    match pending {
        Some((at, _)) => Err(format!("{page}:{at}: a directive above no shell block")),
        None => Ok(blocks),
    }
}

fn directive(rest: &str) -> Result<Run, String> {
    let body = rest
        .strip_suffix("-->")
        .ok_or("a directive ends on its own line with -->")?
        .trim();
    if let Some(reason) = body.strip_prefix("skip:") {
        let reason = reason.trim();
        if reason.is_empty() {
            return Err("a skipped block says why".into());
        }
        return Ok(Run::Skip {
            reason: reason.to_owned(),
        });
    }
    if let Some(ready) = body.strip_prefix("background, ready at ") {
        let ready = ready.trim();
        if !ready.starts_with("http://127.0.0.1:") {
            return Err(format!(
                "a background block is ready at a loopback URL, not {ready:?}"
            ));
        }
        return Ok(Run::Background {
            ready: ready.to_owned(),
        });
    }
    Err(format!(
        "unknown directive {body:?} (skip: WHY, or background, ready at URL)"
    ))
}

/// The outputs a block shows: a comment that begins with `{` or `[` (alone on its line, or after
/// a command), continued by the comment lines right below it that begin with `#  ` (two spaces).
/// `…` stands for anything.
pub fn expected_outputs(text: &str) -> Vec<String> {
    let mut outputs: Vec<String> = Vec::new();
    let mut continues = false;
    for line in text.lines() {
        let trimmed = line.trim_start();
        if continues && let Some(more) = trimmed.strip_prefix("#  ") {
            outputs.last_mut().unwrap().push_str(more.trim());
            continue;
        }
        continues = false;
        let comment = match trimmed.strip_prefix("# ") {
            Some(comment) => Some(comment),
            None => line.find("  # ").map(|at| &line[at + 4..]),
        };
        if let Some(shown) = comment.map(str::trim).filter(|c| c.starts_with(['{', '['])) {
            outputs.push(shown.to_owned());
            continues = true;
        }
    }
    outputs
}

/// Finds each of `expected` in `output`, in order, each after the one before; `…` matches
/// anything. The first one not found is the error.
pub fn find_in_order(output: &str, expected: &[String]) -> Result<(), String> {
    let mut from = 0;
    for shown in expected {
        let mut at = from;
        let mut first = None;
        for piece in shown.split('…').filter(|piece| !piece.is_empty()) {
            match output[at..].find(piece) {
                Some(found) => {
                    first.get_or_insert(at + found);
                    at += found + piece.len();
                }
                None => {
                    return Err(format!(
                        "the page shows {shown:?}, and {piece:?} is not in what came after the \
                         outputs before it: {:?}",
                        &output[from..]
                    ));
                }
            }
        }
        from = at;
    }
    Ok(())
}

#[test]
fn directives_comments_and_outputs_are_read_as_the_test_needs_them() {
    let readme = "# toolgate\n## Set-up\n<!-- README test: background, ready at http://127.0.0.1:8080/readyz -->\n```sh\ncargo run\n```\ntext\n```sh\ncurl -s x   # {\"a\":…}\n# [1,\n#  2]\n# not an output\n```\n<!-- README test: skip: no daemon -->\n```bash\ndocker run\n```\n```toml\nx = 1\n```\n";
    let blocks = shell_blocks("README.md", readme).unwrap();
    assert_eq!(blocks.len(), 3);
    assert_eq!(
        blocks[0].run,
        Run::Background {
            ready: "http://127.0.0.1:8080/readyz".into()
        }
    );
    assert_eq!(blocks[0].section, "Set-up");
    assert_eq!(blocks[0].name(), "README.md:4 (Set-up)");
    assert_eq!(blocks[1].run, Run::Shell);
    assert_eq!(
        blocks[1].expected,
        vec!["{\"a\":…}".to_owned(), "[1,2]".to_owned()]
    );
    assert_eq!(
        blocks[2].run,
        Run::Skip {
            reason: "no daemon".into()
        }
    );
    let page = |text: &str| shell_blocks("docs/x.md", text);
    assert_eq!(
        page("<!-- README test: skip: x -->\ntext\n```sh\nls\n```\n").unwrap_err(),
        "docs/x.md:1: a directive above no shell block"
    );
    assert!(page("<!-- README test: sometimes -->\n```sh\nls\n```\n").is_err());
    assert!(page("<!-- README test: skip: x -->\n```toml\nx=1\n```\n").is_err());

    let shown = |s: &[&str]| s.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert!(
        find_in_order(
            "{\"id\":\"call_1\",\"ok\":true}{\"n\":2}",
            &shown(&["{\"id\":\"call_…\",\"ok\":true}", "{\"n\":2}"])
        )
        .is_ok()
    );
    assert!(find_in_order("{\"n\":2}{\"id\":1}", &shown(&["{\"id\":1}", "{\"n\":2}"])).is_err());
    assert!(find_in_order("{\"ok\":false}", &shown(&["{\"ok\":true}"])).is_err());
}
