"""Tables, figures and the report, drawn from run outputs only."""
