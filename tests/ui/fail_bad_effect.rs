/// Deletes things.
#[derive(toolgate::Tool)]
#[tool(effect = "destructive")]
struct Deleter;

fn main() {}
