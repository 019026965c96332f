/// Says its effect twice.
#[derive(toolgate::Tool)]
#[tool(effect = "read", effect = "write")]
struct Twice;

fn main() {}
