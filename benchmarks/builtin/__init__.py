"""Built-in benchmarks, one module each; `benchmarks._registry.BUILTINS` names them and
imports a module only when its benchmark is used."""
