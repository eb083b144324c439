//! Files that hold secrets (keys, header values) must be readable by their
//! owner only: one that group or others can read is refused, with the fix.
//!
//! And every file toolgate writes is written here, owner-only from its
//! first byte, into folders it makes owner-only. A folder toolgate writes
//! into may hold names someone else planted (an import's output folder
//! inside a cloned repository, say): a symbolic link there must never be
//! followed, or toolgate would write (and `chmod`) a file elsewhere. So a
//! file is created new, under a fresh name, with `O_EXCL | O_NOFOLLOW`, and
//! renamed into place (a rename replaces a link, never writes through it);
//! and a folder that is a link where toolgate expects its own is refused.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::{Context as _, bail};

/// Refuses `path` if its group or others may read or write it.
pub fn check_owner_only(path: &Path) -> anyhow::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(path)?.permissions().mode();
        if mode & 0o077 != 0 {
            anyhow::bail!(
                "{} is readable by group or others (mode {:o}); `chmod 600` it",
                path.display(),
                mode & 0o777
            );
        }
    }
    Ok(())
}

/// Writes `bytes` to `path`, readable by its owner only (0600 whatever the
/// umask), durably and whole: the bytes go to a new file beside it, which
/// is flushed and renamed over `path`, so a reader (or a crash) sees the
/// old content or the new, never half. A symbolic link at `path` is
/// replaced, not followed; a link or file at the temporary name is never
/// opened (a fresh name is taken instead).
pub fn write_owner_only(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    let (tmp, mut file) = create_temporary(path)?;
    let written = file
        .write_all(bytes)
        .and_then(|()| file.sync_all())
        .and_then(|()| std::fs::rename(&tmp, path));
    if let Err(e) = written {
        // Ours (created new above), so ours to remove: nothing half-written stays.
        let _ = std::fs::remove_file(&tmp);
        return Err(e).with_context(|| format!("writing {}", path.display()));
    }
    // The rename is durable once the folder is flushed; a folder that
    // cannot be opened for it (rare) still holds the whole file.
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        let _ = std::fs::File::open(parent).and_then(|d| d.sync_all());
    }
    Ok(())
}

/// Creates `path` new and empty, owner-only, for a store that writes it
/// itself (SQLite's database file, whose `-wal` and `-shm` files SQLite
/// creates with the same mode). `Ok(false)` if something is there already:
/// it is left as it is (not ours to `chmod`), and never followed if a link.
pub fn create_owner_only_new(path: &Path) -> anyhow::Result<bool> {
    match open_new(path) {
        Ok(file) => {
            file.sync_all().map(|()| true).with_context(|| format!("creating {}", path.display()))
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(e).with_context(|| format!("creating {}", path.display())),
    }
}

/// Makes `dir` and any missing parents, each new one owner-only (0700
/// whatever the umask). A folder already there is kept as it is, but `dir`
/// itself must be a real folder: a symbolic link (or a file) there is
/// refused, as what was planted where toolgate's own folder belongs.
pub fn create_private_dir(dir: &Path) -> anyhow::Result<()> {
    match std::fs::symlink_metadata(dir) {
        Ok(meta) if meta.file_type().is_symlink() => {
            bail!(
                "{} is a symbolic link, where toolgate keeps a folder of its own; remove the link (or point toolgate at the folder it names)",
                dir.display()
            )
        }
        Ok(meta) if meta.is_dir() => return Ok(()),
        Ok(_) => bail!("{} is a file, where toolgate keeps a folder; move it away", dir.display()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("reading {}", dir.display())),
    }
    if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty() && !p.exists()) {
        create_private_dir(parent)?;
    }
    let mut builder = std::fs::DirBuilder::new();
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    match builder.create(dir) {
        Ok(()) => restrict_new_dir(dir),
        // Made by another process between the look and the make: look again.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => create_private_dir(dir),
        Err(e) => Err(e).with_context(|| format!("creating {}", dir.display())),
    }
}

/// `mkdir`'s mode is cut by the umask, which might leave a new folder less
/// than 0700 for its owner; this folder is ours (just made), so it is set.
fn restrict_new_dir(dir: &Path) -> anyhow::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
            .with_context(|| format!("restricting {}", dir.display()))?;
    }
    Ok(())
}

/// A file created new beside `path` under a name not taken before, with its
/// name. A name that is taken (by anything: a file, a link) is skipped.
fn create_temporary(path: &Path) -> anyhow::Result<(PathBuf, std::fs::File)> {
    static WRITES: AtomicU64 = AtomicU64::new(0);
    let name = path.file_name().with_context(|| format!("{} names no file", path.display()))?;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let mut last = None;
    for _ in 0..16 {
        let n = WRITES.fetch_add(1, Ordering::Relaxed);
        let tmp = path.with_file_name(format!(
            ".{}.{}.{nanos:x}{n}.tmp",
            name.to_string_lossy(),
            std::process::id()
        ));
        match open_new(&tmp) {
            Ok(file) => return Ok((tmp, file)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => return Err(e).with_context(|| format!("creating {}", tmp.display())),
        }
    }
    Err(last.expect("a failed attempt")).with_context(|| {
        format!("creating a temporary file beside {}: every name tried is taken", path.display())
    })
}

/// `open(O_CREAT | O_EXCL | O_NOFOLLOW, 0600)`: a new file or an error;
/// `fchmod` to 0600 too, as the umask may have cut the owner's bits.
fn open_new(path: &Path) -> std::io::Result<std::fs::File> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        options.mode(0o600).custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC);
    }
    let file = options.open(path)?;
    #[cfg(unix)]
    file.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(0o600))?;
    Ok(file)
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt as _;

    /// A scratch folder removed on drop (this crate has no tempfile).
    struct Scratch(PathBuf);
    impl Scratch {
        fn path(&self) -> &Path {
            &self.0
        }
    }
    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
    fn tempdir() -> Scratch {
        static N: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "toolgate-owner-only-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir(&dir).unwrap();
        Scratch(dir)
    }

    fn mode(path: &Path) -> u32 {
        std::fs::symlink_metadata(path).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn a_link_at_the_path_is_replaced_and_its_target_untouched() {
        let dir = tempdir();
        let outside = dir.path().join("outside");
        std::fs::write(&outside, "theirs").unwrap();
        std::fs::set_permissions(&outside, std::fs::Permissions::from_mode(0o644)).unwrap();
        let out = dir.path().join("out");
        std::fs::create_dir(&out).unwrap();
        std::os::unix::fs::symlink(&outside, out.join("secret")).unwrap();
        std::os::unix::fs::symlink(dir.path().join("nowhere"), out.join("dangling")).unwrap();

        write_owner_only(&out.join("secret"), b"ours").unwrap();
        write_owner_only(&out.join("dangling"), b"ours").unwrap();
        assert_eq!(
            (std::fs::read_to_string(&outside).unwrap().as_str(), mode(&outside)),
            ("theirs", 0o644)
        );
        assert!(!dir.path().join("nowhere").exists());
        for name in ["secret", "dangling"] {
            assert!(std::fs::symlink_metadata(out.join(name)).unwrap().is_file());
            assert_eq!(
                (std::fs::read_to_string(out.join(name)).unwrap().as_str(), mode(&out.join(name))),
                ("ours", 0o600)
            );
        }
        // Nothing but what was asked for is left in the folder.
        assert_eq!(std::fs::read_dir(&out).unwrap().count(), 2);
    }

    #[test]
    fn a_planted_temporary_name_is_never_followed() {
        let dir = tempdir();
        let outside = dir.path().join("outside");
        std::fs::write(&outside, "theirs").unwrap();
        let out = dir.path().join("out");
        std::fs::create_dir(&out).unwrap();
        // The names the old writers used, and a link for each name this one might try.
        for planted in ["toolgate.toml.tmp", "toolgate.toml.partial"] {
            std::os::unix::fs::symlink(&outside, out.join(planted)).unwrap();
        }
        assert!(
            open_new(&out.join("toolgate.toml.tmp")).is_err(),
            "O_EXCL refuses a link at the name"
        );
        write_owner_only(&out.join("toolgate.toml"), b"[gateway]\n").unwrap();
        assert_eq!(std::fs::read_to_string(&outside).unwrap(), "theirs");
        assert_eq!(mode(&out.join("toolgate.toml")), 0o600);
    }

    #[test]
    fn new_files_and_folders_are_owner_only_whatever_the_umask() {
        let dir = tempdir();
        // SAFETY: umask is process-wide; this test restores it and asserts only on its own paths.
        let old = unsafe { libc::umask(0) };
        let made = create_private_dir(&dir.path().join("a/b"))
            .and_then(|()| write_owner_only(&dir.path().join("a/b/f"), b"x"));
        let created = create_owner_only_new(&dir.path().join("a/db"));
        unsafe { libc::umask(old) };
        made.unwrap();
        assert!(created.unwrap());
        assert_eq!((mode(&dir.path().join("a")), mode(&dir.path().join("a/b"))), (0o700, 0o700));
        assert_eq!(
            (mode(&dir.path().join("a/b/f")), mode(&dir.path().join("a/db"))),
            (0o600, 0o600)
        );
        assert!(
            !create_owner_only_new(&dir.path().join("a/db")).unwrap(),
            "an existing file is left alone"
        );
    }

    #[test]
    fn a_link_where_a_folder_belongs_is_refused() {
        let dir = tempdir();
        let elsewhere = dir.path().join("elsewhere");
        std::fs::create_dir(&elsewhere).unwrap();
        std::os::unix::fs::symlink(&elsewhere, dir.path().join("secrets")).unwrap();
        let e = create_private_dir(&dir.path().join("secrets")).unwrap_err().to_string();
        assert!(e.contains("is a symbolic link") && e.contains("remove the link"), "{e}");
        std::os::unix::fs::symlink(dir.path().join("nowhere"), dir.path().join("state")).unwrap();
        assert!(create_private_dir(&dir.path().join("state")).is_err());
        assert!(!dir.path().join("nowhere").exists());
        std::fs::write(dir.path().join("file"), "").unwrap();
        assert!(
            create_private_dir(&dir.path().join("file"))
                .unwrap_err()
                .to_string()
                .contains("is a file")
        );
        create_private_dir(&elsewhere).unwrap();
    }
}
