//! CLI profiles in `~/.config/herald/config.toml` (or `$XDG_CONFIG_HOME/herald/config.toml`, or
//! the file named by `HERALD_CLI_CONFIG`): the daemon's `--dev` writes one, the CLI reads them.
//!
//! ```toml
//! default_profile = "dev"
//! [profiles.dev]
//! url = "http://127.0.0.1:8080"
//! api_key = "hk_…"
//! operator_token = "eyJ…"
//! ```

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Profile {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operator_token: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_token: Option<String>,
}

/// Where profiles live.
pub fn config_path() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("HERALD_CLI_CONFIG") {
        return Some(PathBuf::from(path));
    }
    let base = std::env::var_os("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".config")))?;
    Some(base.join("herald").join("config.toml"))
}

fn read_table(path: &Path) -> Result<toml::Table, String> {
    match std::fs::read_to_string(path) {
        Ok(text) => text.parse::<toml::Table>().map_err(|e| format!("{}: {e}", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(toml::Table::new()),
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

/// The named profile, or the default one (`default_profile`) when `name` is `None`.
pub fn load(path: &Path, name: Option<&str>) -> Result<Option<Profile>, String> {
    let table = read_table(path)?;
    let name = match name {
        Some(name) => name.to_owned(),
        None => match table.get("default_profile").and_then(|v| v.as_str()) {
            Some(name) => name.to_owned(),
            None => return Ok(None),
        },
    };
    let Some(value) = table.get("profiles").and_then(|p| p.get(&name)) else {
        return Ok(None);
    };
    value.clone().try_into().map(Some).map_err(|e| format!("profile `{name}`: {e}"))
}

/// Writes (or replaces) the profile `name`, keeping the others, and makes it the default when no
/// default is set. The file is readable only by its owner: it holds credentials.
pub fn save(path: &Path, name: &str, profile: &Profile) -> Result<(), String> {
    let mut table = read_table(path)?;
    let value = toml::Value::try_from(profile).map_err(|e| e.to_string())?;
    let profiles = table.entry("profiles").or_insert_with(|| toml::Value::Table(toml::Table::new()));
    match profiles.as_table_mut() {
        Some(profiles) => {
            profiles.insert(name.to_owned(), value);
        }
        None => return Err(format!("{}: `profiles` is not a table", path.display())),
    }
    table.entry("default_profile").or_insert_with(|| toml::Value::String(name.to_owned()));
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    let text = toml::to_string(&table).map_err(|e| e.to_string())?;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    use std::io::Write;
    options
        .open(path)
        .and_then(|mut f| f.write_all(text.as_bytes()))
        .map_err(|e| format!("{}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn save_keeps_other_profiles_and_sets_a_default_once() {
        let path = std::env::temp_dir().join(format!("herald-profile-{}.toml", crate::ids::new_body()));
        let dev =
            Profile { url: Some("http://a".into()), api_key: Some("hk_1".into()), ..Default::default() };
        let prod = Profile { url: Some("http://b".into()), ..Default::default() };
        save(&path, "dev", &dev).unwrap();
        save(&path, "prod", &prod).unwrap();
        assert_eq!(load(&path, None).unwrap(), Some(dev.clone()));
        assert_eq!(load(&path, Some("prod")).unwrap(), Some(prod));
        assert_eq!(load(&path, Some("nope")).unwrap(), None);
        let _ = std::fs::remove_file(path);
    }
}
