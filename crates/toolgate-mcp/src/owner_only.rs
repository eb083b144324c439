//! Files that hold secrets (keys, header values) must be readable by their
//! owner only: one that group or others can read is refused, with the fix.

use std::path::Path;

/// Refuses `path` if its group or others may read or write it.
pub fn check_owner_only(path: &Path) -> anyhow::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(path)?.permissions().mode();
        if mode & 0o077 != 0 {
            anyhow::bail!("{} is readable by group or others (mode {:o}); `chmod 600` it", path.display(), mode & 0o777);
        }
    }
    Ok(())
}
