//! `herald man`: man pages generated from the command definitions.

use std::path::Path;

use clap::CommandFactory;

use crate::{Cli, exit::Fail};

pub fn exec(dir: Option<&Path>) -> Result<(), Fail> {
    let command = Cli::command();
    let Some(dir) = dir else {
        let mut out = std::io::stdout().lock();
        return clap_mangen::Man::new(command).render(&mut out).map_err(Fail::from_io);
    };
    std::fs::create_dir_all(dir).map_err(|e| Fail::usage(format!("cannot create {}: {e}", dir.display())))?;
    write_pages(&command, "herald", dir)?;
    Ok(())
}

/// `herald.1`, then `herald-<sub>.1` for every subcommand, recursively.
fn write_pages(command: &clap::Command, name: &str, dir: &Path) -> Result<(), Fail> {
    let page = command.clone().name(name.to_owned());
    let mut buffer = Vec::new();
    clap_mangen::Man::new(page).render(&mut buffer).map_err(Fail::from_io)?;
    let path = dir.join(format!("{name}.1"));
    std::fs::write(&path, buffer)
        .map_err(|e| Fail::failure(format!("cannot write {}: {e}", path.display())))?;
    for sub in command.get_subcommands().filter(|s| s.get_name() != "help") {
        write_pages(sub, &format!("{name}-{}", sub.get_name()), dir)?;
    }
    Ok(())
}
