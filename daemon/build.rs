//! Rebuild when a migration changes: `sqlx::migrate!` embeds the files, but on stable Rust cargo
//! does not know the macro read them.

fn main() {
    println!("cargo:rerun-if-changed=../migrations");
}
