//! The module-layer census (issue #40): inside each crate, modules import one another without a
//! cycle, so the layers in ARCHITECTURE.md ("Layers") can be checked by a reader and stay true.
//!
//! For each crate the test walks the `mod` declarations from every crate root (`lib.rs`,
//! `main.rs`, `bin/*.rs`), so a file is a module (`foo.rs` / `foo/mod.rs` = `foo`, `foo/bar.rs` =
//! `foo::bar`) and test-only files (`#[cfg(test)] mod tests;`) are left out. An edge A -> B is a
//! path in A's non-test code (a `use` tree, a path in a type, expression or pattern, a path in a
//! macro's tokens or in an attribute string such as `deserialize_with = "crate::x::f"`) that
//! names a module of B's file: `crate::`, `super::`, `self::`, a child module, or a name a `use`
//! brought in. The longest module path that exists wins, so `crate::run::snapshot::Answer` points
//! at `run/snapshot.rs`. A parent's `mod x;` and its `pub use x::..` re-exports are no edge (the
//! parent only names its child's items); a parent calling into its child is, and so is a child
//! importing its parent's items, so the two together close a cycle. Any strongly connected component of
//! more than one file fails its crate's test, naming each pair of files and what each side imports.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use proc_macro2::{TokenStream, TokenTree};
use syn::visit::{self, Visit};

type ModPath = Vec<String>;
/// from file -> to file -> the names imported (the segment after the module path).
type Graph = BTreeMap<PathBuf, BTreeMap<PathBuf, BTreeSet<String>>>;

/// `#[cfg(test)]` or `#[cfg(all(test, ..))]`: code that only the crate's own tests compile.
fn is_test(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().filter(|a| a.path().is_ident("cfg")).any(|a| {
        let Ok(meta) = a.parse_args::<syn::Meta>() else {
            return false;
        };
        match meta {
            syn::Meta::Path(p) => p.is_ident("test"),
            syn::Meta::List(l) if l.path.is_ident("all") => l
                .parse_args_with(
                    syn::punctuated::Punctuated::<syn::Meta, syn::Token![,]>::parse_terminated,
                )
                .is_ok_and(|all| all.iter().any(|m| m.path().is_ident("test"))),
            _ => false,
        }
    })
}

/// One parsed file of one crate target, with the module path it defines.
struct Source {
    file: PathBuf,
    module: ModPath,
    ast: syn::File,
}

/// One crate target's modules: module path -> the file defining it (an inline module's is
/// its parent's file), and the non-test files.
struct Target<'a> {
    crate_dir: &'a Path,
    tree: BTreeMap<ModPath, PathBuf>,
    sources: Vec<Source>,
}

impl Target<'_> {
    /// Reads `file` (module `module`, its children under `dir`) and every non-test file below it.
    fn load(&mut self, file: PathBuf, module: ModPath, dir: &Path) {
        let text = std::fs::read_to_string(self.crate_dir.join(&file));
        let text = text.unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let ast = syn::parse_file(&text).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        self.tree.insert(module.clone(), file.clone());
        self.declare(&file, &ast.items, &module, dir);
        self.sources.push(Source { file, module, ast });
    }

    fn declare(&mut self, file: &Path, items: &[syn::Item], module: &ModPath, dir: &Path) {
        for item in items {
            let syn::Item::Mod(m) = item else { continue };
            if is_test(&m.attrs) {
                continue;
            }
            let name = m.ident.to_string();
            let path: ModPath = [&module[..], std::slice::from_ref(&name)].concat();
            if let Some((_, inner)) = &m.content {
                self.tree.insert(path.clone(), file.to_path_buf());
                self.declare(file, inner, &path, &dir.join(&name));
            } else {
                let flat = dir.join(format!("{name}.rs"));
                let file = match self.crate_dir.join(&flat).is_file() {
                    true => flat,
                    false => dir.join(&name).join("mod.rs"),
                };
                self.load(file, path, &dir.join(&name));
            }
        }
    }
}

/// Every path a file's non-test code names, with the module it is written in.
#[derive(Default)]
struct Paths {
    module: ModPath,
    /// (module written in, segments)
    found: Vec<(ModPath, Vec<String>)>,
    /// the same, of `pub use` items: a parent re-exporting its child's items is no edge
    reexports: Vec<(ModPath, Vec<String>)>,
    in_pub_use: bool,
    /// local name -> the segments a `use` gave it
    aliases: BTreeMap<String, (ModPath, Vec<String>)>,
}

impl Paths {
    fn use_tree(&mut self, prefix: &mut Vec<String>, tree: &syn::UseTree) {
        match tree {
            syn::UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                self.use_tree(prefix, &p.tree);
                prefix.pop();
            }
            syn::UseTree::Name(n) if n.ident == "self" => {
                self.leaf(prefix.clone(), prefix.last().cloned())
            }
            syn::UseTree::Name(n) => self.leaf(
                [&prefix[..], &[n.ident.to_string()]].concat(),
                Some(n.ident.to_string()),
            ),
            syn::UseTree::Rename(r) => self.leaf(
                [&prefix[..], &[r.ident.to_string()]].concat(),
                Some(r.rename.to_string()),
            ),
            syn::UseTree::Glob(_) => self.leaf([&prefix[..], &["*".to_string()]].concat(), None),
            syn::UseTree::Group(g) => g.items.iter().for_each(|t| self.use_tree(prefix, t)),
        }
    }

    fn leaf(&mut self, segments: Vec<String>, local: Option<String>) {
        if let Some(local) = local {
            self.aliases
                .insert(local, (self.module.clone(), segments.clone()));
        }
        let list = match self.in_pub_use {
            true => &mut self.reexports,
            false => &mut self.found,
        };
        list.push((self.module.clone(), segments));
    }

    /// Paths inside macro or attribute tokens: `a::b::c` runs, and strings such as
    /// `deserialize_with = "crate::lenient::option"`.
    fn tokens(&mut self, tokens: TokenStream) {
        let mut run: Vec<String> = Vec::new();
        let mut colons = 0; // ':' seen since the run's last ident
        for tt in tokens {
            match &tt {
                TokenTree::Punct(p) if p.as_char() == ':' && !run.is_empty() && colons < 2 => {
                    colons += 1;
                    continue;
                }
                TokenTree::Ident(i) if colons == 2 => {
                    run.push(i.to_string());
                    colons = 0;
                    continue;
                }
                _ => {}
            }
            self.flush(&mut run);
            colons = 0;
            match tt {
                TokenTree::Ident(i) => run.push(i.to_string()),
                TokenTree::Group(g) => self.tokens(g.stream()),
                TokenTree::Literal(l) => {
                    if let Ok(syn::Lit::Str(s)) = syn::parse_str::<syn::Lit>(&l.to_string())
                        && let Ok(p) = syn::parse_str::<syn::Path>(&s.value())
                    {
                        let segments = p.segments.iter().map(|s| s.ident.to_string()).collect();
                        self.found.push((self.module.clone(), segments));
                    }
                }
                TokenTree::Punct(_) => {}
            }
        }
        self.flush(&mut run);
    }

    fn flush(&mut self, run: &mut Vec<String>) {
        if run.len() >= 2 {
            self.found.push((self.module.clone(), std::mem::take(run)));
        }
        run.clear();
    }
}

impl<'ast> Visit<'ast> for Paths {
    fn visit_item(&mut self, item: &'ast syn::Item) {
        let attrs = match item {
            syn::Item::Const(i) => &i.attrs,
            syn::Item::Enum(i) => &i.attrs,
            syn::Item::Fn(i) => &i.attrs,
            syn::Item::Impl(i) => &i.attrs,
            syn::Item::Macro(i) => &i.attrs,
            syn::Item::Mod(i) => &i.attrs,
            syn::Item::Static(i) => &i.attrs,
            syn::Item::Struct(i) => &i.attrs,
            syn::Item::Trait(i) => &i.attrs,
            syn::Item::Type(i) => &i.attrs,
            syn::Item::Use(i) => &i.attrs,
            _ => return visit::visit_item(self, item),
        };
        if !is_test(attrs) {
            visit::visit_item(self, item);
        }
    }
    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        // A file-backed `mod x;` is walked as its own file; an inline one is a module here.
        if m.content.is_some() {
            self.module.push(m.ident.to_string());
            visit::visit_item_mod(self, m);
            self.module.pop();
        }
    }
    fn visit_impl_item(&mut self, item: &'ast syn::ImplItem) {
        if let syn::ImplItem::Fn(f) = item
            && is_test(&f.attrs)
        {
            return;
        }
        visit::visit_impl_item(self, item);
    }
    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        self.in_pub_use = !matches!(u.vis, syn::Visibility::Inherited);
        self.use_tree(&mut Vec::new(), &u.tree);
        self.in_pub_use = false;
    }
    fn visit_path(&mut self, p: &'ast syn::Path) {
        if p.segments.len() >= 2 {
            let segments = p.segments.iter().map(|s| s.ident.to_string()).collect();
            self.found.push((self.module.clone(), segments));
        }
        visit::visit_path(self, p);
    }
    fn visit_macro(&mut self, m: &'ast syn::Macro) {
        visit::visit_macro(self, m);
        self.tokens(m.tokens.clone());
    }
    fn visit_attribute(&mut self, a: &'ast syn::Attribute) {
        // Doc comments link to items without depending on them.
        if !a.path().is_ident("doc")
            && let syn::Meta::List(l) = &a.meta
        {
            self.tokens(l.tokens.clone());
        }
    }
}

type Aliases = BTreeMap<String, (ModPath, Vec<String>)>;

/// A path written in `module` as a path from the crate root, or `None` when it leaves the crate
/// (std, another crate, a local item or variable).
fn absolute(
    tree: &BTreeMap<ModPath, PathBuf>,
    aliases: &Aliases,
    module: &[String],
    segments: &[String],
    depth: u8,
) -> Option<Vec<String>> {
    let (head, rest) = segments.split_first()?;
    match head.as_str() {
        "crate" => Some(rest.to_vec()),
        "self" => Some([module, rest].concat()),
        "super" => {
            let ups = segments.iter().take_while(|s| *s == "super").count();
            Some(
                [
                    module.get(..module.len().checked_sub(ups)?)?,
                    &segments[ups..],
                ]
                .concat(),
            )
        }
        _ if tree.contains_key(&[module, std::slice::from_ref(head)].concat()) => {
            Some([module, segments].concat())
        }
        // `use a::b;` then `b::c`: the `use`'s own path, read where the `use` was written.
        _ if depth < 4 => {
            let (at, target) = aliases.get(head)?;
            Some(
                [
                    absolute(tree, aliases, at, target, depth + 1)?,
                    rest.to_vec(),
                ]
                .concat(),
            )
        }
        _ => None,
    }
}

/// The file of the longest module path that `path` starts with, and the name it takes from it.
fn target_of(tree: &BTreeMap<ModPath, PathBuf>, path: &[String]) -> (PathBuf, String) {
    let len = (0..=path.len())
        .rev()
        .find(|&n| tree.contains_key(&path[..n]))
        .unwrap_or(0);
    let name = path
        .get(len)
        .or(path.last())
        .cloned()
        .unwrap_or_else(|| "crate".into());
    (tree[&path[..len]].clone(), name)
}

/// Every crate target's edges between files, from its roots down.
fn graph(crate_dir: &Path) -> Graph {
    let mut roots: Vec<PathBuf> = ["lib.rs", "main.rs"]
        .iter()
        .map(|f| PathBuf::from("src").join(f))
        .collect();
    if let Ok(bins) = std::fs::read_dir(crate_dir.join("src/bin")) {
        roots.extend(
            bins.flatten()
                .map(|e| PathBuf::from("src/bin").join(e.file_name())),
        );
    }
    let mut graph = Graph::new();
    for root in roots.into_iter().filter(|r| crate_dir.join(r).is_file()) {
        let mut target = Target {
            crate_dir,
            tree: BTreeMap::new(),
            sources: Vec::new(),
        };
        target.load(root.clone(), Vec::new(), root.parent().unwrap());
        for source in &target.sources {
            let mut paths = Paths {
                module: source.module.clone(),
                ..Paths::default()
            };
            paths.visit_file(&source.ast);
            let edges = graph.entry(source.file.clone()).or_default();
            let reexports = paths.reexports.iter().map(|found| (found, true));
            for ((module, segments), reexport) in
                paths.found.iter().map(|f| (f, false)).chain(reexports)
            {
                let tree = &target.tree;
                let Some(path) = absolute(tree, &paths.aliases, module, segments, 0) else {
                    continue;
                };
                if reexport && path.len() > module.len() && path.starts_with(module) {
                    continue;
                }
                let (to, name) = target_of(tree, &path);
                if to != source.file {
                    edges.entry(to).or_default().insert(name);
                }
            }
        }
    }
    graph
}

/// Tarjan's strongly connected components of more than one file.
fn knots(graph: &Graph) -> Vec<Vec<PathBuf>> {
    struct State<'g> {
        graph: &'g Graph,
        index: BTreeMap<&'g PathBuf, usize>,
        stack: Vec<&'g PathBuf>,
        knots: Vec<Vec<PathBuf>>,
    }
    fn connect<'g>(s: &mut State<'g>, v: &'g PathBuf) -> usize {
        let n = s.index.len();
        s.index.insert(v, n);
        s.stack.push(v);
        let mut low = n;
        for w in s.graph.get(v).into_iter().flat_map(|e| e.keys()) {
            low = match s.index.get(w) {
                None => low.min(connect(s, w)),
                Some(&i) if s.stack.contains(&w) => low.min(i),
                Some(_) => low,
            };
        }
        if low == n {
            let at = s.stack.iter().position(|x| *x == v).unwrap();
            let knot: Vec<PathBuf> = s.stack.drain(at..).cloned().collect();
            if knot.len() > 1 {
                s.knots.push(knot);
            }
        }
        low
    }
    let mut s = State {
        graph,
        index: BTreeMap::new(),
        stack: Vec::new(),
        knots: Vec::new(),
    };
    for v in graph.keys() {
        if !s.index.contains_key(v) {
            connect(&mut s, v);
        }
    }
    s.knots
}

/// The census of one crate: each knot, its pairs of files that import each other, and the
/// one-way imports that close its longer loops.
fn census(krate: &str) -> Vec<String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(krate);
    let graph = graph(&dir);
    let names = |a: &PathBuf, b: &PathBuf| {
        let set = &graph[a][b];
        set.iter().cloned().collect::<Vec<_>>().join(", ")
    };
    let mut lines = Vec::new();
    for mut knot in knots(&graph) {
        knot.sort();
        let files: Vec<String> = knot.iter().map(|f| f.display().to_string()).collect();
        lines.push(format!(
            "{krate}: a knot of {} files: {}",
            knot.len(),
            files.join(" ")
        ));
        for a in &knot {
            for b in knot.iter().filter(|b| graph[a].contains_key(*b)) {
                let back = graph[b].contains_key(a);
                if back && a < b {
                    lines.push(format!(
                        "{krate}: {} -> {} ({}) and {} -> {} ({})",
                        a.display(),
                        b.display(),
                        names(a, b),
                        b.display(),
                        a.display(),
                        names(b, a)
                    ));
                } else if !back {
                    lines.push(format!(
                        "{krate}:   {} -> {} ({})",
                        a.display(),
                        b.display(),
                        names(a, b)
                    ));
                }
            }
        }
    }
    lines
}

/// One test per crate, so a crate without cycles passes on its own.
macro_rules! census_of {
    ($($krate:ident),*) => {$(
        #[test]
        fn $krate() {
            let lines = census(stringify!($krate));
            assert!(lines.is_empty(), "module cycles (see ARCHITECTURE.md, \"Layers\"):\n{}", lines.join("\n"));
        }
    )*};
}

census_of!(protocol, crds, nats, providers, operator, worker, cli, e2e);
