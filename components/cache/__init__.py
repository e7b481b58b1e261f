"""The answer cache: its lookup and store components, the answer memory behind them and the question keys it matches on."""
