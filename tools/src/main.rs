//! bourse-tools: load generator, feed subscriber and journal inspector (being built).

fn main() {
    eprintln!("bourse-tools: no tool is built yet (see README: status)");
    std::process::exit(2);
}
