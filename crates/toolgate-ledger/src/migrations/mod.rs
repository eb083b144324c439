//! The schema's versions: one list per store, of the files beside this one
//! (`sqlite/`, `postgres/`), applied in order by the store at open
//! (`sqlite::conn`, `postgres::pool`). A store records how many it applied,
//! so version N is the Nth entry: never edit or reorder a shipped one,
//! append. Both stores hold the same versions under the same names; the
//! test below fails when one gains a migration the other lacks.

/// One schema version: its file's name (`0001_approvals`) and its SQL.
pub(crate) type Migration = (&'static str, &'static str);

/// The migrations of `$store` named, each read from `$store/<name>.sql`.
macro_rules! listed {
    ($store:literal: $($name:literal),+ $(,)?) => {
        &[$(($name, include_str!(concat!($store, "/", $name, ".sql")))),+]
    };
}

/// SQLite's migrations, in order.
pub(crate) const SQLITE: &[Migration] = listed!("sqlite":
    "0001_approvals",
    "0002_operations",
    "0003_receipts",
    "0004_approval_subject",
    "0005_operation_subject",
    "0006_approval_operation_key",
    "0007_runs",
    "0008_compact_receipts",
    "0009_archives",
    "0010_digests",
    "0011_retention",
    "0012_fleet",
    "0013_connections",
);

/// PostgreSQL's migrations, in order.
pub(crate) const POSTGRES: &[Migration] = listed!("postgres":
    "0001_approvals",
    "0002_operations",
    "0003_receipts",
    "0004_approval_subject",
    "0005_operation_subject",
    "0006_approval_operation_key",
    "0007_runs",
    "0008_compact_receipts",
    "0009_archives",
    "0010_digests",
    "0011_retention",
    "0012_fleet",
    "0013_connections",
);

#[cfg(test)]
mod tests {
    use super::{Migration, POSTGRES, SQLITE};

    fn names(list: &[Migration]) -> Vec<&str> {
        list.iter().map(|(name, _)| *name).collect()
    }

    /// A migration added to one store and not the other (or in another
    /// place, or under another name) fails here.
    #[test]
    fn both_stores_list_the_same_migrations_in_the_same_order() {
        assert_eq!(names(SQLITE), names(POSTGRES));
    }

    /// Version N is the Nth entry (a store records how many it applied), so
    /// each name's number is its place in the list.
    #[test]
    fn each_migration_is_numbered_by_its_place() {
        for list in [SQLITE, POSTGRES] {
            for (i, (name, _)) in list.iter().enumerate() {
                assert_eq!(name.get(..5), Some(format!("{:04}_", i + 1).as_str()), "{name}");
            }
        }
    }

    /// Every file in a store's folder is listed: one written and not
    /// listed would never be applied.
    #[test]
    fn every_migration_file_is_listed() {
        for (store, list) in [("sqlite", SQLITE), ("postgres", POSTGRES)] {
            let folder =
                std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/migrations").join(store);
            let mut files: Vec<String> = std::fs::read_dir(&folder)
                .unwrap()
                .map(|e| e.unwrap().file_name().into_string().unwrap())
                .filter_map(|f| f.strip_suffix(".sql").map(str::to_string))
                .collect();
            files.sort();
            assert_eq!(files, names(list), "{}", folder.display());
        }
    }
}
