#[derive(toolgate::Tool)]
#[tool(effect = "read")]
struct Undocumented;

fn main() {}
