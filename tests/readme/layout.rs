//! docs/architecture.md against `src/`: every folder of `src/`, at any depth, is named in the
//! page's layout by its path (`src/store/postgres/writer/`), so a folder added, moved or renamed
//! without the page fails here, naming it. None is left out: the inbox's `templates/` and
//! `assets/` are where a contributor looks for the pages, so they are named too.

use std::path::Path;

/// Every folder under `dir`, as `src/a/b/`, in order.
fn folders(root: &Path, dir: &Path, into: &mut Vec<String>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.is_dir())
        .collect();
    entries.sort();
    for path in entries {
        let relative = path
            .strip_prefix(root)
            .unwrap()
            .to_string_lossy()
            .into_owned();
        into.push(format!("{relative}/"));
        folders(root, &path, into);
    }
}

/// Whether `page` names `folder` itself, not only a folder inside it (`src/store/` is not named
/// by `src/store/sqlite/`).
fn names(page: &str, folder: &str) -> bool {
    page.match_indices(folder).any(|(at, _)| {
        let after = page[at + folder.len()..].chars().next();
        !after.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
    })
}

#[test]
fn the_layout_names_every_folder_of_src() {
    let root = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let page = std::fs::read_to_string(root.join("docs/architecture.md")).unwrap();
    let mut all = Vec::new();
    folders(&root, &root.join("src"), &mut all);
    assert!(all.len() > 10, "src/ holds {all:?}");
    let missing: Vec<&String> = all.iter().filter(|folder| !names(&page, folder)).collect();
    assert!(
        missing.is_empty(),
        "docs/architecture.md's layout does not name these folders of src/: {missing:?}; add each, \
         by its path, with what it holds (and drop the ones that are gone)"
    );
}

#[test]
fn a_folder_is_named_by_its_own_path() {
    let page = "src/store/sqlite/   the embedded backend\nsrc/inbox/ and more";
    assert!(names(page, "src/store/sqlite/"));
    assert!(!names(page, "src/store/"));
    assert!(names(page, "src/inbox/"));
}
