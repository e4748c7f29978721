-- A small online shop: customers, products, orders and their lines.
-- Written for Palaestra (Apache-2.0). Loaded into a fresh in-memory database per session.
CREATE TABLE customers (
  id INTEGER PRIMARY KEY,
  name TEXT NOT NULL,
  city TEXT NOT NULL,
  country TEXT NOT NULL,
  joined DATE NOT NULL
);
CREATE TABLE products (
  id INTEGER PRIMARY KEY,
  name TEXT NOT NULL,
  category TEXT NOT NULL,
  price REAL NOT NULL,
  stock INTEGER NOT NULL
);
CREATE TABLE orders (
  id INTEGER PRIMARY KEY,
  customer_id INTEGER NOT NULL REFERENCES customers(id),
  ordered_at DATE NOT NULL,
  status TEXT NOT NULL CHECK (status IN ('pending', 'shipped', 'delivered', 'cancelled'))
);
CREATE TABLE order_items (
  order_id INTEGER NOT NULL REFERENCES orders(id),
  product_id INTEGER NOT NULL REFERENCES products(id),
  quantity INTEGER NOT NULL,
  unit_price REAL NOT NULL,
  PRIMARY KEY (order_id, product_id)
);
INSERT INTO customers VALUES
  (1, 'Ada Byrne', 'Dublin', 'Ireland', '2023-01-15'),
  (2, 'Bruno Costa', 'Porto', 'Portugal', '2023-03-02'),
  (3, 'Chen Wei', 'Shanghai', 'China', '2023-04-20'),
  (4, 'Dana Ortiz', 'Madrid', 'Spain', '2023-06-11'),
  (5, 'Emil Novak', 'Prague', 'Czechia', '2023-08-30'),
  (6, 'Fatima Zahra', 'Rabat', 'Morocco', '2024-01-05'),
  (7, 'Gus Lindqvist', 'Malmo', 'Sweden', '2024-02-14'),
  (8, 'Hana Sato', 'Osaka', 'Japan', '2024-03-21'),
  (9, 'Ivo Petrov', 'Sofia', 'Bulgaria', '2024-05-09'),
  (10, 'Julia Keller', 'Dublin', 'Ireland', '2024-07-01');
INSERT INTO products VALUES
  (1, 'Trail Mug', 'kitchen', 12.5, 40),
  (2, 'Chef Knife', 'kitchen', 64.0, 12),
  (3, 'Cast Iron Pan', 'kitchen', 45.0, 0),
  (4, 'Wool Blanket', 'home', 89.0, 7),
  (5, 'Desk Lamp', 'home', 39.9, 25),
  (6, 'Linen Pillow', 'home', 24.0, 60),
  (7, 'Rain Jacket', 'outdoor', 120.0, 5),
  (8, 'Head Torch', 'outdoor', 29.5, 18),
  (9, 'Camp Stove', 'outdoor', 75.0, 0),
  (10, 'Water Filter', 'outdoor', 34.0, 22),
  (11, 'Notebook', 'office', 6.5, 150),
  (12, 'Fountain Pen', 'office', 48.0, 9);
INSERT INTO orders VALUES
  (1, 1, '2024-01-10', 'delivered'),
  (2, 2, '2024-01-18', 'delivered'),
  (3, 1, '2024-02-03', 'delivered'),
  (4, 3, '2024-02-20', 'shipped'),
  (5, 4, '2024-03-05', 'cancelled'),
  (6, 5, '2024-03-15', 'delivered'),
  (7, 6, '2024-04-01', 'pending'),
  (8, 2, '2024-04-12', 'shipped'),
  (9, 8, '2024-05-02', 'delivered'),
  (10, 1, '2024-05-20', 'pending'),
  (11, 9, '2024-06-08', 'delivered'),
  (12, 4, '2024-06-30', 'delivered'),
  (13, 3, '2024-07-14', 'delivered'),
  (14, 10, '2024-07-22', 'shipped');
INSERT INTO order_items VALUES
  (1, 1, 2, 12.5), (1, 11, 5, 6.5),
  (2, 2, 1, 64.0),
  (3, 4, 1, 89.0), (3, 6, 2, 24.0),
  (4, 7, 1, 120.0), (4, 8, 2, 29.5),
  (5, 3, 1, 45.0),
  (6, 5, 1, 39.9), (6, 11, 10, 6.0),
  (7, 10, 1, 34.0), (7, 9, 1, 75.0),
  (8, 12, 1, 48.0), (8, 11, 3, 6.5),
  (9, 1, 4, 12.5),
  (10, 2, 1, 60.0), (10, 3, 1, 45.0),
  (11, 7, 1, 115.0),
  (12, 6, 4, 24.0), (12, 5, 2, 39.9),
  (13, 8, 1, 29.5), (13, 10, 2, 34.0),
  (14, 4, 1, 89.0);
