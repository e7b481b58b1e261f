"""tables: grids read as tables (caption, header, rows, notes) and written as rows that keep their column names."""

import subprocess
import sys

from gatehouse.components.tables import Merged, grid_rows, is_number, parallel_rows, read_tables, render, table_rows


def test_table_rows_keep_each_cell_with_its_header():
    assert table_rows(["Plan", "Price"], [["Solo", "$8"], ["", ""]]) == ["- Plan: Solo; Price: $8"]
    assert table_rows(["", ""], [["Region", "North"]]) == ["- Region: North"]  # a key-value table
    assert table_rows(["Total:"], [["5"]]) == ["- Total: 5"]  # a name's own colon is not doubled


def test_grid_rows_take_the_first_row_of_names_as_the_header():
    assert grid_rows([["", ""], ["Plan", "Price"], ["", " "], ["Solo", "$8"]]) == ["- Plan: Solo; Price: $8"]
    assert grid_rows([["Region", "North"]]) == ["Region; North"]  # names with no row under them
    assert grid_rows([["Total", "5,738"]]) == ["- Total: 5,738"]  # a lone row of figures has no header
    assert grid_rows([["", ""]]) == []


def test_is_number_tells_figures_from_words():
    assert all(map(is_number, ["1,234.5", "-12%", "(300)", "$8", "EUR 12", "12 kg", "€ 1.200,50", "2019"]))
    assert not any(map(is_number, ["Q1", "4B", "A1", "Rev", "2020-01-01", ""]))


def test_read_tables_title_blank_and_units_rows_are_the_caption_not_a_header():
    grid = [["3. Analyses by segment"], [], ["in EUR thousands"], ["Segment", "Revenue", "EBIT"],
            ["North", "1,200", "(30)"], ["South", "900", "45"], ["Source: annual report"]]
    [table] = read_tables(grid)
    assert table.caption == ["3. Analyses by segment", "in EUR thousands"]
    assert table.header == ["Segment", "Revenue", "EBIT"]
    assert [cells for _, cells in table.rows] == [["North", "1,200", "(30)"], ["South", "900", "45"]]
    assert table.notes == ["Source: annual report"]
    assert render(table) == ["3\\. Analyses by segment, in EUR thousands:",  # not read as a numbered item
                             "- Segment: North; Revenue: 1,200; EBIT: (30)", "- Segment: South; Revenue: 900; EBIT: 45",
                             "", "Source: annual report"]


def test_read_tables_several_tables_on_one_grid_stay_apart():
    grid = [["Sales"], ["Region", "Q1"], ["North", "10"], ["South", "4"], [], ["Staff"], ["Name", "Role"],
            ["Ada", "Lead"], [], ["Region", "Q2"], ["North", "12"], [], ["East", "3"]]
    tables = read_tables(grid)
    assert [(t.caption, t.header, len(t.rows)) for t in tables] == [
        (["Sales"], ["Region", "Q1"], 2), (["Staff"], ["Name", "Role"], 1), ([], ["Region", "Q2"], 2)]
    assert grid_rows(grid)[:4] == ["Sales:", "- Region: North; Q1: 10", "- Region: South; Q1: 4", ""]
    names_after_figures = [["Region", "Sales"], ["North", "10"], [], ["Name", "Role"], ["Ada", "Lead"]]
    assert grid_rows(names_after_figures) == ["- Region: North; Sales: 10", "", "- Name: Ada; Role: Lead"]


def test_read_tables_merged_header_cells_name_each_column_they_span():
    marked = [["", "2019", Merged("2019", left=True), "2020", Merged("2020", left=True)],
              ["Segment", "Revenue", "EBIT", "Revenue", "EBIT"], ["North", "1", "2", "3", "4"]]
    unmarked = [["", "2019", "", "2020", ""], *marked[1:]]  # a CSV or a grid that lost its merges
    for grid in (marked, unmarked):
        assert grid_rows(grid) == ["- Segment: North; 2019 Revenue: 1; 2019 EBIT: 2; 2020 Revenue: 3; 2020 EBIT: 4"]
    # a text spanning the columns of a body row is kept once; a label spanning rows stays in each row
    body = [["Region", "Item", "Price"], ["North", "Paint", "120"], [Merged("North", left=False), "Labour", "400"],
            ["Total", Merged("Total", left=True), "520"]]
    assert grid_rows(body) == ["- Region: North; Item: Paint; Price: 120", "- Region: North; Item: Labour; Price: 400",
                               "- Region: Total; Price: 520"]


def test_read_tables_a_row_of_names_in_a_text_table_is_a_row_not_more_header():
    assert grid_rows([["Name", "Team", ""], ["Ada", "Data", "x"]]) == ["- Name: Ada; Team: Data; x"]


def test_read_tables_one_cell_rows_label_the_rows_under_them():
    grid = [["Region", "Sales"], ["Lille", "10"], ["South"], ["Porto", "4"]]
    assert grid_rows(grid) == ["- Region: Lille; Sales: 10", "- South › Region: Porto; Sales: 4"]


def test_read_tables_a_form_of_labels_and_values_has_no_header():
    assert grid_rows([["Customer:", "ACME"], ["Date:", "2020-01-01"], ["GRAND TOTAL:", "5,738"]]) == [
        "- Customer: ACME", "- Date: 2020-01-01", "- GRAND TOTAL: 5,738"]
    assert grid_rows([["Plan", "Price"], ["Solo", "8"]], header=False) == ["- Plan: Price", "- Solo: 8"]


def test_read_tables_one_cell_rows_alone_are_a_list():
    assert grid_rows([["Name"], ["Ada"], ["Lin"]]) == ["- Name", "- Ada", "- Lin"]


def test_read_tables_side_by_side_tables_are_read_apart():
    grid = [["", "Big cities", "", "", "", "Small cities"],
            ["", "City", "Population", "", "", "City", "Population"],
            ["", "Lagos", "16060000", "", "", "Oahu", "953000"]]
    assert grid_rows(grid) == ["Big cities:", "- City: Lagos; Population: 16060000", "",
                               "Small cities:", "- City: Oahu; Population: 953000"]
    spacer = [["Name", "Team", "", "Q1", "Q2"], ["Ada", "Data", "", "10", "12"]]  # one table with an empty column
    assert grid_rows(spacer) == ["- Name: Ada; Team: Data; Q1: 10; Q2: 12"]


def test_read_tables_a_header_printed_again_is_left_out_and_a_title_row_over_one_starts_a_table():
    grid = [["Monthly income"], ["Item", "Amount"], ["Salary", "2500"], ["Item", "Amount"], ["Bonus", "100"],
            ["Monthly expenses"], ["Item", "Amount"], ["Rent", "800"]]
    assert grid_rows(grid) == ["Monthly income:", "- Item: Salary; Amount: 2500", "- Item: Bonus; Amount: 100", "",
                               "Monthly expenses:", "- Item: Rent; Amount: 800"]


def test_parallel_rows_a_row_of_cells_holding_their_lines_side_by_side_is_that_many_rows():
    cells = [["", "Gross income", "Levies"], ["€", "17,542", "0"], ["€", "17,542", "0", ""]]
    assert parallel_rows(cells) == [["", "€", "€"], ["Gross income", "17,542", "17,542"], ["Levies", "0", "0"]]
    assert parallel_rows([["Notes", "on two lines"], ["Ada"]]) == [["Notes on two lines", "Ada"]]
    grid = [["", "2006", "2007"], *parallel_rows(cells)]  # the units row under the header names the columns too
    assert grid_rows(grid) == ["- Gross income; 2006 €: 17,542; 2007 €: 17,542",
                               "- Levies; 2006 €: 0; 2007 €: 0"]


def test_read_tables_long_text_between_rows_stays_in_place_and_a_long_text_merged_down_is_kept_once():
    note = "Prices below include delivery within the city; outside it a fee applies per kilometre driven."
    contract = "Supply and installation of the fire alarm system at the depot, as described in annex one."
    grid = [["Item", "Price", "Terms"], ["Alarm", "900", contract], ["Sirens", "120", Merged(contract, left=False)],
            [note], ["Cabling", "300", "net 30"]]
    assert grid_rows(grid) == ["- Item: Alarm; Price: 900; Terms: " + contract, "- Item: Sirens; Price: 120",
                               "", note, "", "- Item: Cabling; Price: 300; Terms: net 30"]


def test_read_tables_reads_a_long_sheet_in_linear_time():
    """Each row looked ahead to its block's end: a sheet of 10,000 rows took 5 minutes (quadratic)."""
    code = ("from gatehouse.components.tables import grid_rows; "
            "rows = [['Name', 'Value']] + [[f'n{i}', str(i)] for i in range(200_000)]; print(len(grid_rows(rows)))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout == "200000\n"
