from gatehouse.components.tables import grid_rows, table_rows


def test_table_rows_keep_each_cell_with_its_header():
    assert table_rows(["Plan", "Price"], [["Solo", "$8"], ["", ""]]) == ["- Plan: Solo; Price: $8"]
    assert table_rows(["", ""], [["Region", "North"]]) == ["- Region: North"]  # a key-value table


def test_grid_rows_take_the_first_row_with_text_as_the_header():
    assert grid_rows([["", ""], ["Plan", "Price"], ["", " "], ["Solo", "$8"]]) == ["- Plan: Solo; Price: $8"]
    assert grid_rows([["Region", "North"]]) == ["- Region: North"]  # a lone row has no header
    assert grid_rows([["", ""]]) == []
